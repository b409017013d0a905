# The FlexKV server image: the static binary and the configurations, nothing
# else. Built by `make docker`, which compiles build/flexkv first
# (CGO_ENABLED=0), since the image has no toolchain and pulls no base.
FROM scratch
COPY build/flexkv /flexkv
COPY configs/ /configs/
ENV FLEXKV_CONFIG=/configs/docker.yaml FLEXKV_DATA_DIR=/data FLEXKV_CERTS_DIR=/certs
VOLUME /data
EXPOSE 7100 7200 7300
ENTRYPOINT ["/flexkv"]
CMD ["server"]
