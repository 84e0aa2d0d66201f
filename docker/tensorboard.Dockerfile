# TensorBoard for the runs on FSx: small, non-root, runs on the system nodes (which cannot hold the
# multi-GB Neuron training image). Same tensorboard pin as training/requirements.txt.
FROM public.ecr.aws/docker/library/python:3.12-slim-bookworm

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY training/requirements.txt /tmp/requirements.txt
RUN grep -E '^tensorboard==' /tmp/requirements.txt > /tmp/tensorboard.txt \
 && pip install --no-cache-dir -r /tmp/tensorboard.txt \
 && rm -f /tmp/requirements.txt /tmp/tensorboard.txt

USER 65534:65534
EXPOSE 6006
ENTRYPOINT ["tensorboard"]
CMD ["--logdir", "/data/runs", "--host", "0.0.0.0", "--port", "6006"]
