"""The rooms of lib/ and their order (DESIGN.md section 2), shared by scripts/check-includes (what a
file may include) and scripts/check-calls (what an object may call).

Rooms, lowest first. A file may include, and an object may call, its own room and the rooms
below it; lib/init.c sits on top of everything. lib/cuda is the CUDA backend: only init (which
hands it to the device room) reaches it. The gradient module is narrower still: besides the
public API it uses base/ and one internal header, work/composite.h (and what that includes). The
drop-in layer (lib/pmpi, libtcoll-mpi.so) includes the public header and mpi/layer.h only."""
import os

BELOW = {
    "base": set(),
    "device": {"base"},
    "cuda": {"base", "device"},
    "core": {"base", "device"},
    "mpiglue": {"base", "device", "core"},
    "sched": {"base", "device", "core", "mpiglue"},
    "node": {"base", "device", "core", "mpiglue", "sched"},
    "work": {"base", "device", "core", "mpiglue", "sched", "node"},
    "mpi": {"base", "device", "core", "mpiglue", "sched", "node", "work"},
    "local": {"base", "device", "core", "mpiglue", "sched", "node", "work", "mpi"},
    "grad": {"base", "device", "core", "mpiglue", "sched", "node", "work", "mpi"},
    "init": {"base", "device", "cuda", "core", "mpiglue", "sched", "node", "work", "mpi", "local", "grad"},
    # the drop-in layer, a library of its own on top: the public API and PMPI_HEADER only
    "pmpi": {"mpi"},
}

# The drop-in layer's one internal header (relative to lib/): the table's verdict.
PMPI_HEADER = "mpi/layer.h"

# The gradient module's one internal header (relative to lib/), besides base/.
GRAD_HEADER = "work/composite.h"
# The files whose symbols that header offers (composite works; the checks and tensor helpers it
# includes), relative to lib/.
GRAD_SOURCES = {"work/composite.c", "argcheck.c", "tensor.c"}


def room_of_path(rel):
    """The room of a file, given its path relative to lib/ (None: in no room)."""
    parts = rel.split(os.sep)
    if len(parts) == 1:
        return "init" if parts[0] == "init.c" else "core"
    return parts[0] if parts[0] in BELOW else None


def may_use(room, other):
    return other == room or other in BELOW[room]
