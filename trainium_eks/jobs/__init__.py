"""What runs on the cluster for a training run: dataset staging or preparation, the BERT job,
TensorBoard, and how one Trainium node is shared between them and its DaemonSets."""
