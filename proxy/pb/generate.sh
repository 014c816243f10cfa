#!/usr/bin/env bash
# Regenerates the protobuf classes in this folder from apache/rocketmq-apis (the proto files under
# apache/rocketmq/v2/), pinned by commit. Only the message classes are generated (no gRPC stubs:
# the proxy speaks HTTP/2 itself, rmq_cluster.proxy.grpc_wire).
#   usage: proxy/pb/generate.sh PATH_TO_ROCKETMQ_APIS_CHECKOUT
# needs grpcio-tools==1.85.1 (it bundles protoc); the generated code runs on protobuf>=6.
set -euo pipefail
APIS_COMMIT=3e60073   # apache/rocketmq-apis "feat: add deployment and lite topic fields to Admin service (#116)"
src=${1:?path to an apache/rocketmq-apis checkout}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git -C "$src" archive "$APIS_COMMIT" apache/rocketmq/v2 | tar -x -C "$tmp"
python3 -m grpc_tools.protoc -I "$tmp" --python_out="$tmp" \
    "$tmp"/apache/rocketmq/v2/definition.proto "$tmp"/apache/rocketmq/v2/service.proto
for name in definition service; do
    # the generated service module imports definition as a top-level package: make it relative
    sed -e 's/^from apache\.rocketmq\.v2 import definition_pb2/from . import definition_pb2/' \
        "$tmp/apache/rocketmq/v2/${name}_pb2.py" > "$here/${name}_pb2.py"
done
