"""``trainplan launch PLAN --format torchrun|slurm|k8s``: what a user runs to start a plan on a real
cluster (a torchrun line, an sbatch script, or a Kubeflow PyTorchJob); see executor/launch_files.py.

Example::

    trainplan launch plan.json --format k8s --nodes 2 --gpus-per-node 8 --image registry/trainplan:1 --out job.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("launch", help="write a torchrun line, sbatch script or PyTorchJob for a plan",
                              description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("plan", metavar="PLAN", help="plan file (trainplan plan --out, simulate --save-plan)")
    p.add_argument("--format", required=True, choices=("torchrun", "slurm", "k8s"), help="what to write")
    p.add_argument("--nodes", type=int, help="nodes (default: as many as the plan's ranks need)")
    p.add_argument("--gpus-per-node", type=int, help="processes (GPUs) per node (default: the cluster's)")
    p.add_argument("--image", help="container image holding trainplan and torch (k8s: required; slurm: pyxis)")
    p.add_argument("--job-name", default="trainplan", help="job / resource name (default trainplan)")
    p.add_argument("--out", help="file to write (default: stdout)")
    p.set_defaults(handler=run)


def run(args) -> int:
    from executor.launch_files import (LaunchFormat, launch_shape, render_k8s, render_slurm,
                                       render_torchrun)
    from simulator.errors import SpecError
    from simulator.jsonio import check_writable
    from simulator.plan_file import load_plan

    fmt = LaunchFormat.parse(args.format)
    if args.out is not None:
        check_writable(args.out, "out")
    if fmt is LaunchFormat.K8S and not args.image:
        raise SpecError("image", "a PyTorchJob needs a container image holding trainplan and torch; give --image")
    if fmt is LaunchFormat.TORCHRUN and args.image:
        raise SpecError("image", "a torchrun line runs in the current environment; drop --image, or use "
                        "--format slurm or k8s")
    _check_name(args.job_name)
    try:
        plan = load_plan(args.plan)
    except SpecError as err:
        raise SpecError("PLAN", str(err)) from None
    shape = launch_shape(plan, args.nodes, args.gpus_per_node)
    if fmt is LaunchFormat.TORCHRUN:
        text = render_torchrun(args.plan, shape)
    elif fmt is LaunchFormat.SLURM:
        text = render_slurm(args.plan, shape, args.image, args.job_name)
    else:
        text = render_k8s(plan, Path(args.plan).name, shape, args.image, args.job_name)
    if args.out is None:
        sys.stdout.write(text)
    else:
        _write(args.out, text)
        print(f"launch: wrote {args.out} ({shape.nodes} nodes x {shape.gpus_per_node} processes, "
              f"world size {shape.world_size}, {shape.backend})", file=sys.stderr)
    return 0


def _check_name(name: str) -> None:
    """A Kubernetes resource name (RFC 1123 label: lower-case alphanumerics and '-')."""
    import re

    from simulator.errors import SpecError

    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?", name):
        raise SpecError("job-name", f"{name!r} is not a valid name; use lower-case letters, digits and '-' "
                        "(at most 52 characters)")


def _write(path: str, text: str) -> None:
    """Write atomically (temporary file renamed over ``path``)."""
    import os
    import tempfile

    from simulator.errors import SpecError

    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o755 if text.startswith("#!") else 0o644)
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise SpecError("out", f"cannot write {path!r} ({err.strerror})") from None
