"""Asking a container registry whether an image exists, the way ``docker pull`` does.

The training image's base is a public ECR image addressed by its registry alias
(``public.ecr.aws/neuron/...``); the ``ecr-public`` API describes only registries named by account
ID, so the check uses the registry's own pull API instead (OCI distribution spec, "Pulling
manifests": ``HEAD /v2/<name>/manifests/<reference>``, 200 if it exists, 404 if not) with the
anonymous bearer token that public.ecr.aws hands out for pulls (Docker registry token
authentication: ``GET /token/?scope=repository:<name>:pull``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.client import HTTPMessage
from typing import IO

#: The only registry the check speaks to: where the Neuron training DLCs are published.
PUBLIC_ECR = "public.ecr.aws"
#: Manifest media types a pull accepts (multi-arch index first), OCI image-spec and Docker's.
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


@dataclass(frozen=True)
class HttpAnswer:
    """Status, headers (lower-case names) and body of one HTTP exchange."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


#: Sends a request and returns the answer (errors answered by the server are answers too).
Http = Callable[[urllib.request.Request], HttpAnswer]


class _AnswerRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect answered as it is (an :class:`HttpAnswer` of status 3xx with its ``Location``)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


#: HEAD requests are not redirected: urllib sends a redirected request again without its method
#: (``HTTPRedirectHandler.redirect_request`` builds a plain ``Request(newurl)``), so a HEAD of a
#: file would become its download. The first answer is what the checks read: Hugging Face answers a
#: file's HEAD with a redirect to its storage that carries the file's size (huggingface_hub 2.4.0
#: ``utils/_http.py``, ``_httpx2_follow_hub_redirects_with_backoff``: "Redirects to any other host
#: (CDN, storage bucket) are not [followed]: the file metadata is on the redirect response itself").
_HEAD_OPENER = urllib.request.build_opener(_AnswerRedirects)


def urllib_http(request: urllib.request.Request) -> HttpAnswer:
    """:data:`Http` over urllib (a HEAD's redirect is its answer); a network failure raises
    ``urllib.error.URLError``."""
    opener = _HEAD_OPENER.open if request.get_method() == "HEAD" else urllib.request.urlopen
    try:
        with opener(request, timeout=20) as response:
            return HttpAnswer(
                response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
            )
    except urllib.error.HTTPError as err:
        return HttpAnswer(err.code, {k.lower(): v for k, v in err.headers.items()}, err.read())


@dataclass(frozen=True)
class ImageRef:
    """``registry/name:tag`` or ``registry/name@digest``, split."""

    registry: str
    name: str
    reference: str

    @classmethod
    def parse(cls, image: str) -> ImageRef:
        registry, _, rest = image.partition("/")
        if "@" in rest:
            name, _, reference = rest.partition("@")
        else:
            name, _, reference = rest.rpartition(":") if ":" in rest else (rest, "", "latest")
        return cls(registry, name, reference)


@dataclass(frozen=True)
class ImageAnswer:
    """What the registry said of an image: HTTP status and, when it exists, its digest."""

    status: int
    digest: str = ""


def head_manifest(image: ImageRef, http: Http) -> ImageAnswer:
    """Ask ``public.ecr.aws`` for the image's manifest without downloading it."""
    token_url = f"https://{image.registry}/token/?scope=repository:{image.name}:pull"
    token = http(urllib.request.Request(token_url))
    if token.status != 200:
        return ImageAnswer(token.status)
    bearer = json.loads(token.body)["token"]
    answer = http(
        urllib.request.Request(
            f"https://{image.registry}/v2/{image.name}/manifests/{image.reference}",
            method="HEAD",
            headers={"Authorization": f"Bearer {bearer}", "Accept": ", ".join(MANIFEST_TYPES)},
        )
    )
    return ImageAnswer(answer.status, answer.headers.get("docker-content-digest", ""))
