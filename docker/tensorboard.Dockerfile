# The tools image: TensorBoard for the runs on FSx, the EFA and FSx exporters of the platform's
# Prometheus (training/node/efa_exporter.py, training/node/fsx_exporter.py), and the training job's
# submitter (training/launch/submit.py, with the kubernetes client). Small and non-root: it
# runs on the system nodes (which cannot hold the multi-GB Neuron training image) and, as the EFA
# exporter, on every Trainium node within seconds of it joining. Same pins as
# training/requirements.txt.
FROM public.ecr.aws/docker/library/python:3.12-slim-bookworm
# The base's digest, resolved by the in-region build (trainium_eks/image_build.py).
ARG BASE_DIGEST=unresolved
LABEL org.opencontainers.image.base.name="public.ecr.aws/docker/library/python:3.12-slim-bookworm" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY training/requirements.txt /tmp/requirements.txt
RUN grep -E '^(tensorboard|prometheus-client|kubernetes)==' /tmp/requirements.txt > /tmp/tools.txt \
 && pip install --no-cache-dir -r /tmp/tools.txt \
 && rm -f /tmp/requirements.txt /tmp/tools.txt

WORKDIR /opt/trainium-bert
# The exporters read their ports from the job contract (standard library only).
COPY trainium_job/ trainium_job/
# All of the training package (sources, a few hundred kB): a job of the user's own image copies it
# and trainium_job into its pods at start (trainium_eks.TrainiumTrainingJob's init container) for
# the pod program, the driver check and the fabric check, which run there on the image's torch.
COPY training/ training/
ENV PYTHONPATH=/opt/trainium-bert \
    PYTHONUNBUFFERED=1

USER 65534:65534
EXPOSE 6006
ENTRYPOINT ["tensorboard"]
CMD ["--logdir", "/data/runs", "--host", "0.0.0.0", "--port", "6006"]
