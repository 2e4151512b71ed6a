/* Every argument check of the public API lives in argcheck.c. A check only reads its
 * arguments: it starts no communication and allocates nothing that outlives it. Each failure
 * names the argument, its value and what was expected. */
#ifndef TC_ARGCHECK_H
#define TC_ARGCHECK_H

#include "base/base.h"
#include "base/redop.h"
#include "tensor.h" /* tc_check_tensor_desc: a tensor description on its own */

/* ---- building blocks ---- */

/* A descriptor plus data (NULL data is allowed only with zero elements) that lives where
 * device says (checked with the backend: tc_dev_check_pointer). */
int tc_check_tensor(const tcoll_tensor_t *t, const char *name);
/* An output: data == NULL (tcoll allocates) or exactly dtype / shape / device, with data where
 * device says. */
int tc_check_output(const tcoll_tensor_t *out, const char *name, tcoll_dtype_t dtype, int ndim,
                    const int64_t *shape, int device);
/* dim in [-ndim, ndim); *norm gets it in [0, ndim). */
int tc_check_dim(int dim, int ndim, const char *name, int *norm);
int tc_check_rank(int rank, const tcoll_comm_t *comm, const char *name);
/* Writable output that may coincide with an input only when `same_ok` and exactly equal. */
int tc_check_disjoint(const tcoll_tensor_t *out, const char *oname, const tcoll_tensor_t *in,
                      const char *iname, bool same_ok);

/* tcoll_tensor_copy and tcoll_tensor_copy_async: same dtype and number of elements. */
int tc_check_copy(const tcoll_tensor_t *dst, const tcoll_tensor_t *src);

/* ---- one check per collective; each resolves comm (NULL = world) into *c ---- */

int tc_check_all_reduce(const tcoll_tensor_t *in, tcoll_redop_t op, tcoll_comm_t *comm,
                        const tcoll_tensor_t *out, tcoll_comm_t **c, tc_redop_t *rop);
int tc_check_all_reduce_coalesced(const tcoll_tensor_t *in, int n, tcoll_redop_t op,
                                  tcoll_comm_t *comm, const tcoll_tensor_t *out, tcoll_comm_t **c,
                                  tc_redop_t *rop);
/* *dim: normalized gather_dim; *inplace: in is out's own slice (dim 0, MPI_IN_PLACE form). */
int tc_check_all_gather(const tcoll_tensor_t *in, int gather_dim, tcoll_comm_t *comm,
                        const tcoll_tensor_t *out, tcoll_comm_t **c, int *dim, bool *inplace);
int tc_check_all_gather_coalesced(const tcoll_tensor_t *in, int n, tcoll_comm_t *comm,
                                  const tcoll_tensor_t *out, tcoll_comm_t **c);
int tc_check_reduce_scatter(const tcoll_tensor_t *in, tcoll_redop_t op, int scatter_dim,
                            tcoll_comm_t *comm, const tcoll_tensor_t *out, tcoll_comm_t **c,
                            tc_redop_t *rop, int *dim);
/* dims receives the n normalized scatter dims. */
int tc_check_reduce_scatter_coalesced(const tcoll_tensor_t *in, int n, tcoll_redop_t op,
                                      const int *scatter_dims, tcoll_comm_t *comm,
                                      const tcoll_tensor_t *out, tcoll_comm_t **c, tc_redop_t *rop,
                                      int *dims);
int tc_check_all_to_all_single(const tcoll_tensor_t *in, const int64_t *output_split_sizes,
                               const int64_t *input_split_sizes, tcoll_comm_t *comm,
                               const tcoll_tensor_t *out, tcoll_comm_t **c, int64_t *out_rows);
int tc_check_broadcast(const tcoll_tensor_t *in, int src, tcoll_comm_t *comm,
                       const tcoll_tensor_t *out, tcoll_comm_t **c);
int tc_check_permute(const tcoll_tensor_t *in, const int *src_dst, tcoll_comm_t *comm,
                     const tcoll_tensor_t *out, tcoll_comm_t **c);
int tc_check_shard_dim_all_to_all(const tcoll_tensor_t *in, int gather_dim, int shard_dim,
                                  tcoll_comm_t *comm, const tcoll_tensor_t *out, tcoll_comm_t **c,
                                  int *gdim, int *sdim);
int tc_check_reduce(const tcoll_tensor_t *in, int dst, tcoll_redop_t op, tcoll_comm_t *comm,
                    const tcoll_tensor_t *out, tcoll_comm_t **c, tc_redop_t *rop);
int tc_check_gather(const tcoll_tensor_t *in, int dst, tcoll_comm_t *comm,
                    const tcoll_tensor_t *outs, tcoll_comm_t **c);
int tc_check_scatter(const tcoll_tensor_t *ins, int src, tcoll_comm_t *comm,
                     const tcoll_tensor_t *out, tcoll_comm_t **c);
int tc_check_all_gather_list(const tcoll_tensor_t *in, tcoll_comm_t *comm,
                             const tcoll_tensor_t *outs, tcoll_comm_t **c);
int tc_check_reduce_scatter_list(const tcoll_tensor_t *ins, tcoll_redop_t op, tcoll_comm_t *comm,
                                 const tcoll_tensor_t *out, tcoll_comm_t **c, tc_redop_t *rop);
int tc_check_all_to_all(const tcoll_tensor_t *ins, tcoll_comm_t *comm, const tcoll_tensor_t *outs,
                        tcoll_comm_t **c);

/* Shape rules shared by the collectives and the meta functions. */
int tc_all_gather_shape(const tcoll_tensor_t *in, int dim, int group_size, int64_t *shape);
int tc_reduce_scatter_shape(const tcoll_tensor_t *in, int dim, int group_size, int64_t *shape);

#endif
