"""The TorchX component, at the path the README's ``torchx run`` command names.

It lives in the job contract (``trainium_job.torchx_component``) next to the renderer the CDK
construct uses; see there.
"""

from trainium_job.torchx_component import trn_dist_ddp

__all__ = ["trn_dist_ddp"]
