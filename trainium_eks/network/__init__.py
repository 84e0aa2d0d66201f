"""The VPC the platform runs in (:class:`~trainium_eks.network.vpc.TrainiumNetwork`)."""
