"""Constructs for distributed training on AWS Trainium with Amazon EKS."""
