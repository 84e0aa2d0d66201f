"""What the checks look at: the configuration, the account, and how to reach AWS and registries."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import PlatformConfig
from .aws import Clients
from .check_list import Http
from .requirement import BootstrapRequirement


@dataclass(frozen=True)
class Target:
    """One run of the doctor.

    Attributes:
        config: the app's configuration (cdk.json context plus ``-c`` overrides).
        aws: the clients (:class:`~.aws.BotoClients`, or stubbed ones in tests).
        account: the caller's account ID (from STS).
        bootstrap: what the pinned aws-cdk-lib needs of the bootstrap stack.
        http: how a container registry is asked (:func:`~.registry.urllib_http`, or a stub).
    """

    config: PlatformConfig
    aws: Clients
    account: str
    bootstrap: BootstrapRequirement
    http: Http

    @property
    def environment(self) -> str:
        """``aws://<account>/<region>``, as ``cdk bootstrap`` takes it."""
        return f"aws://{self.account}/{self.config.region}"
