"""Write pulsar_wire_pb2.py from pulsar_wire.proto with protoc (grpcio-tools): `make pulsar-proto`.

`generated()` returns the module's text without writing it, for the test that the committed module
is what the .proto gives.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent / "codec"
PROTO = HERE / "pulsar_wire.proto"
MODULE = HERE / "pulsar_wire_pb2.py"


def generated() -> str:
    from grpc_tools import protoc     # a test/tooling dependency, not needed to serve

    with tempfile.TemporaryDirectory() as out:
        status = protoc.main(["protoc", f"-I{HERE}", f"--python_out={out}", str(PROTO)])
        if status != 0:
            raise RuntimeError(f"protoc failed with status {status}")
        return (Path(out) / MODULE.name).read_text()


def main() -> int:
    MODULE.write_text(generated())
    print(f"wrote {MODULE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
