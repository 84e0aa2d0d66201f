"""The ECR repository and the training and TensorBoard images built from it in the region."""
