"""The EKS cluster, its system nodes and access, and the helpers every add-on binds to it with:
pinned EKS managed add-ons and Pod Identity roles."""
