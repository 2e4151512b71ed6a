/* Composite works, and the one header the gradient module includes beyond the public API and
 * base/ (DESIGN.md section 2; doc/guide.md, "Architecture").
 *
 * A composite work is a work of the registry that posts no MPI request of its own. It is keyed
 * under its caller's outputs (so tcoll_wait on them behaves as for any collective); its one
 * schedule step waits for the inner public collectives the caller posted (into host scratch it
 * owns), then runs the caller's finish (local math writing the outputs; device outputs through a
 * completion copy). Every inner collective is posted when the caller's call is made, never later,
 * so all ranks post them in program order.
 *
 * Besides composite works the gradient module takes from here the collectives' own argument
 * checks and tensor helpers (argcheck.h, tensor.h), so that a forward refuses exactly what its
 * collective would before it makes a node; it never touches works, the registry, schedules or
 * MPI (scripts/check-calls checks its objects). */
#ifndef TC_COMPOSITE_H
#define TC_COMPOSITE_H

#include "../argcheck.h"
#include "../tensor.h"

typedef struct tc_comp tc_comp_t; /* a composite work */
typedef int (*tc_comp_fn)(void *ctx);

/* Bytes of the caller's state that live inside the composite (no allocation per call). */
#define TC_COMP_CTX_BYTES 176

/* Starts a composite named op (logs, traces) on comm that waits for at most nwait inner
 * buffers. *ctx: TC_COMP_CTX_BYTES zeroed bytes, 16-byte aligned, for the caller's
 * state, valid until the composite is recycled. */
int tc_comp_begin(tc_comp_t **c, const char *op, tcoll_comm_t *comm, int nwait, void **ctx);
void *tc_comp_ctx(tc_comp_t *c);
/* Prepares output k (allocating it if out->data == NULL, as described by desc; output 0
 * describes the composite in logs). written: *host gets the host buffer finish writes (the
 * output itself, or scratch copied to the device at completion); otherwise the output is left
 * unchanged (zero-filled if allocated) and *host is NULL. */
int tc_comp_output(tc_comp_t *c, int k, tcoll_tensor_t *out, const tcoll_tensor_t *desc,
                   bool written, void **host);
/* Keys the composite under its outputs: TCOLL_ERR_BUSY if one is pending. */
int tc_comp_register(tc_comp_t *c);
/* Host scratch held until the composite is recycled. */
void *tc_comp_scratch(tc_comp_t *c, size_t nbytes);
/* A host view of t for reading now: t itself (after waiting if pending) when on the host, else
 * a scratch copy. */
int tc_comp_host_view(tc_comp_t *c, const tcoll_tensor_t *t, const void **p);
/* Records that inner work is pending on p (called whatever the inner call returned, so that a
 * failed call that left requests in flight is completed before scratch is reused). */
void tc_comp_wait_on(tc_comp_t *c, void *p);
/* Finishes posting. On success the composite is pending on its outputs: once every inner buffer
 * completed, finish(ctx) runs (not after an inner failure), then release(ctx) (NULL: none). On
 * failure here every inner collective already posted is completed, release(ctx) runs and the
 * composite is undone. Returns rc. */
int tc_comp_end(tc_comp_t *c, int rc, tc_comp_fn finish, tc_comp_fn release);

/* Completes whatever is pending on p, without a deadline (TCOLL_TIMEOUT does not apply). */
int tc_comp_wait(const void *p);
/* TCOLL_ERR_INVALID_ARGUMENT naming argname unless comm is a live communicator. */
int tc_comp_comm_live(tcoll_comm_t *comm, const char *argname);

#endif
