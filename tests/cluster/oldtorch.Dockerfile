# A stand-in for an image whose torch kdist does not support: the bare image
# (torch, no kdist) with a torch package that says 2.3.1 first on the path.
# kdist's launcher reads torch's version.py without importing it and must
# refuse the job by name (exit 2) before any worker starts; the stand-in
# cannot even be imported, so a worker that started would say so.
ARG BASE=kdist-bare:dev-cpu
FROM ${BASE}
USER 0
RUN mkdir -p /opt/oldtorch/torch \
 && echo "__version__ = '2.3.1'" > /opt/oldtorch/torch/version.py \
 && echo "raise ImportError('the torch 2.3.1 stand-in of kdist-oldtorch')" > /opt/oldtorch/torch/__init__.py
ENV PYTHONPATH=/opt/oldtorch
USER 1000:1000
