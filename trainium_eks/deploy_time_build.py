"""cdklabs-deploy-time-build's per-stack singletons, as the library names them: the image builds'
CodeBuild project and the function that starts a build. The images package hardens them
(:mod:`trainium_eks.images.training_image`) and :mod:`trainium_eks.nag` acknowledges their
findings; both read the names here.
"""

from __future__ import annotations

from typing import Final

#: Construct IDs the library gives its per-stack singletons (0.1.14: ``SingletonProject`` with
#: uuid e83729fe-..., purpose ContainerImageBuildAmd64; ``SingletonFunction`` with uuid
#: db740fd5-..., purpose DeployTimeBuildCustomResourceHandler); a version that names them otherwise
#: is refused at synth (harden_builds).
PROJECT_ID: Final = "ContainerImageBuildAmd64e83729feb1564e709bec452b15847a30amd64"
HANDLER_ID: Final = "DeployTimeBuildCustomResourceHandlerdb740fd554364a848a09e6dfcd01f4f3"
#: The newest Node.js Lambda runtime in aws-cdk-lib 2.275 (the library pins nodejs22.x as a raw
#: string; its handler uses only the runtime's AWS SDK v3, which nodejs24.x also ships).
HANDLER_RUNTIME: Final = "nodejs24.x"
