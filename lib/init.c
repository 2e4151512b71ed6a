/* Library lifetime: tcoll_init / tcoll_finalize and the version. */
#include "base/base.h"

#include "base/redop.h"
#include "base/scratch.h"
#include "bootstrap.h"
#include "comm.h"
#include "drive.h"
#include "device/cache.h"
#include "device/device.h"
#include "grad/grad.h"
#include "local/local.h"
#include "mpi/algo.h"
#include "mpiglue/mpi_glue.h"
#include "mpiglue/mpi_impl.h"
#include "node/heap.h"
#include "node/segment.h"
#include "sched/placement.h"
#include "sched/schedule.h"
#include "work/detail.h"
#include "work/pipeline.h"
#include "work/progress.h"
#include "work/registry.h"
#include "work/trace.h"

#include <stdio.h>

/* The hardware device backend (lib/cuda), where it is built: handed to the device room, which
 * knows only its interface. */
#ifdef TCOLL_HAVE_CUDA
extern const tc_device_ops_t tc_cuda_device_ops;
#define HARDWARE_BACKEND (&tc_cuda_device_ops)
#else
#define HARDWARE_BACKEND NULL
#endif

/* Recursive: MPI_Comm_delete_attr in tcoll_finalize calls on_mpi_finalize, which locks it too. */
static pthread_mutex_t init_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static int finalize_keyval = MPI_KEYVAL_INVALID;
/* tcoll_init called MPI_Init_thread, possibly in a call that failed later on: a later
 * tcoll_init finds MPI initialized but still owns it. */
static int mpi_started_here;

int tcoll_version(void) {
  return TCOLL_VERSION_CODE(TCOLL_VERSION_MAJOR, TCOLL_VERSION_MINOR, TCOLL_VERSION_PATCH);
}
const char *tcoll_version_suffix(void) { return TCOLL_VERSION_SUFFIX; }

/* Everything but MPI itself; runs from tcoll_finalize or, if the host program finalizes MPI
 * first, from MPI_Finalize (through an attribute on MPI_COMM_SELF). */
static void teardown(void) {
  tc_progress_stop();
  tc_registry_report_unwaited();
  tc_wait_everything(0.0); /* finalize completes everything, however long */
  tc_registry_flush(); /* works of the last waits go back to the pool now, before the pools go */
  tc_trace_dump("finalize");
  tc_detail_fini();
  tc_bootstrap_fini();
  tc_meshes_destroy_all();
  tc_comms_destroy_all();
  tc_g.world = NULL;
  tc_mpi_glue_fini();
  tc_mpi_errors_fini();
  tc_pipe_cleanup();
  tc_sched_cleanup();
  tc_local_cleanup();
  tc_cache_fini(); /* before the backend that device and pinned blocks came from goes */
  tc_heap_close(); /* after the cache gave its free blocks back to it */
  tc_dev_fini();
  tc_scratch_cleanup();
  tc_registry_cleanup(); /* first: its deferred pops may still return works to the pool */
  tc_work_pool_cleanup();
  tc_redop_cleanup();
  tg_cleanup();
  tc_trace_reset();
}

static int on_mpi_finalize(MPI_Comm comm, int keyval, void *attr, void *extra) {
  TC_UNUSED(comm);
  TC_UNUSED(keyval);
  TC_UNUSED(attr);
  TC_UNUSED(extra);
  pthread_mutex_lock(&init_mu);
  if (tc_g.init_count > 0) {
    if (tc_g.mpi_finalize_expected) /* the drop-in layer in a program that bypasses it there */
      tc_info("MPI_Finalize before tcoll_finalize (expected): tcoll shuts down now");
    else
      tc_warn("MPI_Finalize was called before tcoll_finalize; tcoll shuts down now");
    teardown();
    __atomic_store_n(&tc_g.init_count, 0, __ATOMIC_RELEASE);
    PMPI_Comm_free_keyval(&finalize_keyval); /* freed once this attribute is deleted */
  }
  pthread_mutex_unlock(&init_mu);
  return MPI_SUCCESS;
}

static int start_mpi(int *argc, char ***argv) {
  int inited = 0, fin = 0;
  PMPI_Initialized(&inited);
  PMPI_Finalized(&fin);
  if (fin)
    return tc_error(TCOLL_ERR_STATE,
                    "MPI is already finalized (tcoll cannot start after MPI_Finalize)");
  if (inited) {
    tc_g.mpi_owned = mpi_started_here;
    PMPI_Query_thread(&tc_g.thread_level);
    return TCOLL_SUCCESS;
  }
  int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &tc_g.thread_level);
  if (rc != MPI_SUCCESS) return tc_error(TCOLL_ERR_MPI, "MPI_Init_thread failed (code %d)", rc);
  tc_g.mpi_owned = mpi_started_here = 1;
  return TCOLL_SUCCESS;
}

/* TCOLL_DEBUG=INFO: what the device path will do on this rank. */
static void log_devices(void) {
  if (tc_cfg.debug < TCOLL_LOG_INFO) return;
  char dev[512], mpi[256];
  tc_info("devices: %s; %s", tc_dev_describe(dev, sizeof dev),
          tc_placement_describe(mpi, sizeof mpi));
}

static int start_library(void) {
  PMPI_Comm_rank(MPI_COMM_WORLD, &tc_g.world_rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &tc_g.world_size);
  int rc = tc_algo_check_tables();
  if (!rc) rc = tc_config_load();
  if (rc) return rc;
  if (tc_g.thread_level < MPI_THREAD_MULTIPLE)
    tc_info(
        "MPI provides thread level %d (not MPI_THREAD_MULTIPLE): call tcoll from one thread at a "
        "time",
        tc_g.thread_level);
  if ((rc = tc_mpi_glue_init())) return rc;
  tc_mpi_errors_init();
  if ((rc = tc_dev_init(HARDWARE_BACKEND))) return rc;
  tc_cache_init();
  tc_config_on_cache_limit(tc_cache_trim);
  tc_heap_open(); /* before the world communicator, whose segment maps it */
  tc_cache_set_host_source((tc_host_source_t){tc_heap_alloc, tc_heap_free});
  tc_placement_init();
  tc_mpi_impl_init();
  log_devices();
  tc_comm_set_drain(tc_wait_comm);
  tc_comm_set_create(tc_node_attach);
  tc_comm_set_release(tc_node_release);
  tc_set_drive(tc_sched_drive_all);
  if ((rc = tc_bootstrap_init())) return rc;
  MPI_Comm dup;
  rc = PMPI_Comm_dup(MPI_COMM_WORLD, &dup);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_dup(MPI_COMM_WORLD)");
  if ((rc = tc_comm_wrap(dup, TC_COMM_WORLD, &tc_g.world))) return rc;
  snprintf(tc_g.world->name, sizeof tc_g.world->name, "world");
  if (finalize_keyval == MPI_KEYVAL_INVALID)
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_mpi_finalize, &finalize_keyval, NULL);
  PMPI_Comm_set_attr(MPI_COMM_SELF, finalize_keyval, NULL);
  return tc_progress_start();
}

int tcoll_init(int *argc, char ***argv) {
  TC_ENTER("tcoll_init");
  tc_config_on_algo(tc_algo_setting);
  pthread_mutex_lock(&init_mu);
  if (tc_g.init_count > 0) {
    tc_g.init_count++;
    pthread_mutex_unlock(&init_mu);
    return TCOLL_SUCCESS;
  }
  int rc = start_mpi(argc, argv);
  if (!rc) {
    rc = start_library();
    if (rc) teardown();
  }
  if (!rc) __atomic_store_n(&tc_g.init_count, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&init_mu);
  return rc;
}

int tcoll_finalize(void) {
  TC_ENTER("tcoll_finalize");
  pthread_mutex_lock(&init_mu);
  if (tc_g.init_count <= 0) {
    pthread_mutex_unlock(&init_mu);
    return tc_error(TCOLL_ERR_STATE,
                    "tcoll is not initialized (tcoll_finalize without tcoll_init)");
  }
  if (--tc_g.init_count > 0) {
    pthread_mutex_unlock(&init_mu);
    return TCOLL_SUCCESS;
  }
  int fin = 0;
  PMPI_Finalized(&fin);
  if (!fin) {
    PMPI_Comm_delete_attr(MPI_COMM_SELF, finalize_keyval);
    PMPI_Comm_free_keyval(&finalize_keyval); /* made again by the next tcoll_init */
    teardown();
  }
  int rc = TCOLL_SUCCESS;
  if (tc_g.mpi_owned && !fin) {
    if (PMPI_Finalize() != MPI_SUCCESS) rc = tc_error(TCOLL_ERR_MPI, "MPI_Finalize failed");
  }
  tc_g.mpi_owned = 0;
  pthread_mutex_unlock(&init_mu);
  return rc;
}
