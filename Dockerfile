# syntax=docker/dockerfile:1
# hami-py: one image for `hami scheduler`, `hami device-plugin` and `hami monitor`.
#
#   docker build -t hami-py:dev .                                   # core + every vendor plugin
#   docker build --build-arg PLUGINS="nvidia metax" -t hami-py:dev . # core + the named plugins only
#   docker build --build-arg HAMI_CORE_IMAGE= ...                   # without HAMi-core's libvgpu.so
#
# PLUGINS: space-separated names of plugins/hami-<name> ("" = core only, "all" = every plugin).
# EXTRAS: pip extras added to every plugin (e.g. "nvml" pulls pynvml for hami-nvidia's NVML discovery).
# HAMI_CORE_IMAGE: an upstream HAMi image whose /k8s-vgpu/lib/nvidia/ (libvgpu.so, ld.so.preload) is
#   copied into /k8s-vgpu/lib/nvidia/ here; the device-plugin DaemonSet's postStart installs it on the host
#   (/usr/local/vgpu), as HAMi's vgpu-init.sh does. hami-py itself ships no CUDA interposer library.
ARG PYTHON_VERSION=3.12
ARG HAMI_CORE_IMAGE=projecthami/hami:v2.6.1

FROM python:${PYTHON_VERSION}-slim AS build
ARG PLUGINS=all
ARG EXTRAS=nvml
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY hami_core ./hami_core
COPY plugins ./plugins
# Build wheels for the core (with every component's extra: scheduler, node, monitor) and the selected plugins,
# then install them into a self-contained venv. Globbing is off around pip: `.[all]` is not a pattern.
RUN set -eu; \
    python -m venv /opt/hami; \
    if [ "$PLUGINS" = "all" ]; then \
        PLUGINS=$(for d in plugins/hami-*/; do n=${d#plugins/hami-}; printf '%s ' "${n%/}"; done); \
    fi; \
    targets=".[all]"; \
    for p in $PLUGINS; do \
        test -f "plugins/hami-$p/pyproject.toml" || { echo "unknown plugin: $p" >&2; exit 1; }; \
        if [ "$p" = nvidia ] && [ -n "$EXTRAS" ]; then targets="$targets ./plugins/hami-$p[$EXTRAS]"; \
        else targets="$targets ./plugins/hami-$p"; fi; \
    done; \
    set -f; /opt/hami/bin/pip install $targets; set +f; \
    /opt/hami/bin/hami version; \
    /opt/hami/bin/hami plugins

# Optional stage: HAMi-core's libvgpu.so from an upstream HAMi image (empty HAMI_CORE_IMAGE => empty dir).
FROM ${HAMI_CORE_IMAGE:-busybox} AS hamilib
RUN mkdir -p /k8s-vgpu/lib/nvidia

FROM python:${PYTHON_VERSION}-slim
LABEL org.opencontainers.image.title="hami-py" \
      org.opencontainers.image.description="HAMi GPU-sharing scheduler, device plugin and monitor in Python" \
      org.opencontainers.image.licenses="Apache-2.0"
# NVIDIA container runtime: expose the driver's compute/utility libraries (NVML) to the device plugin and
# the monitor, as HAMi's image does. Harmless on nodes without it.
ENV PATH=/opt/hami/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_DISABLE_REQUIRE=true
COPY --from=build /opt/hami /opt/hami
COPY --from=hamilib /k8s-vgpu/lib/nvidia/ /k8s-vgpu/lib/nvidia/
# The scheduler runs as this user; the device plugin and monitor override it (they need host sockets and
# the HAMi-core shared regions, owned by root).
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin hami
USER 10001
ENTRYPOINT ["hami"]
CMD ["--help"]
