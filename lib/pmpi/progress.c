/* What drives routed nonblocking calls while the program blocks elsewhere in MPI. A legal program
 * has rank 0 post an MPI_Iallreduce and then receive a message that rank 1 sends only once its own
 * wait on that collective returned, which needs rank 0's part of it: something must test rank 0's
 * pending calls while it sits in MPI_Recv, a call the layer never sees. Two ways:
 *
 * hook (Open MPI): a callback in MPI's own progress loop (opal_progress_register, the way Open
 * MPI's own nonblocking collectives progress), so every MPI call that waits (MPI_Recv, MPI_Wait, a
 * collective passed through) drives them, in the program's thread. It needs no thread level of
 * its own, so the program keeps the level it asked for: Open MPI 4.1's point-to-point takes locks
 * under MPI_THREAD_MULTIPLE, a price paid on every call, the layer's or not. It is registered at
 * the first routed nonblocking call (a program that makes none never has it). The callback enters
 * tcoll only where this thread is not inside tcoll already (LAY_TCOLL). A program that links
 * libtcoll itself may be inside tcoll without the layer knowing, so there the layer takes the
 * thread.
 *
 * thread (MPICH, whose progress loop takes no callback; or TCOLL_MPI_PROGRESS=thread): a thread
 * tests the calls no other thread drives, which needs MPI_THREAD_MULTIPLE. On a machine with a core
 * per rank and no more, every wake-up of it takes a rank's core: it leaves a call alone for 50 us
 * after its post (a program that waits at once completes it undisturbed: on 2 cores a thread
 * testing the same call made a 64 KiB MPI_Iallreduce + MPI_Wait 2.4x the blocking one), polls every
 * 20 us only while it drives a call, every 200 us while calls are young, backs off from 200 us to 2
 * ms (8 ms where ranks have no spare core: BACKOFF_MAX_CROWDED_NS) while every call is driven by
 * the program's own threads (they wait for them: a wake-up there only takes a core; at 2 ranks on
 * 2 cores, waking every 200 us made MPICH's 2 MiB MPI_Ireduce_scatter_block through the layer 1.30x
 * MPICH's own, where with no wake-ups it was 1.00x: a call the program then leaves undriven waits
 * up to the longest nap), and sleeps on a condition
 * variable after 2 ms without any call (a post wakes it then). */
#define _GNU_SOURCE
#include "pending.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

_Thread_local __attribute__((tls_model("initial-exec"))) int lay_in_tcoll;

static lay_progress_t running; /* 0: none started */

/* Tests each call listed before posted_before that no other thread drives, once (at most 64 in a
 * pass), completing those done. Returns how many it tested; *completed: how many it completed. */
static int progress_pass(uint64_t posted_before, int *completed) {
  bool busy;
  entry_t *e, *tested[64];
  int n = 0, seen = 0;
  *completed = 0;
  while (n < 64 && (e = lay_claim_on(NULL, posted_before, &busy)) != NULL) {
    seen++;
    if (lay_test_claimed(e))
      ++*completed;
    else
      tested[n++] = e; /* stays claimed until the pass ends, so lay_claim_on moves on */
  }
  for (int i = 0; i < n; i++) lay_unclaim(tested[i]);
  return seen;
}

/* ------------------------------------------------------------------ hook */

typedef int (*opal_callback_t)(void);
static int (*opal_register)(opal_callback_t), (*opal_unregister)(opal_callback_t);
/* Registered at the first routed nonblocking call: a program that never makes one (its blocking
 * calls complete inside the layer) never pays a call per turn of the loop. */
static bool hook_registered;
static pthread_t mpi_thread; /* the thread that started the layer */
static bool only_mpi_thread;
static pthread_mutex_t register_mu = PTHREAD_MUTEX_INITIALIZER;

/* Called by Open MPI at every turn of its progress loop, in whichever thread waits: one load where
 * nothing is pending. Never inside tcoll: neither below a call of the layer's into it, nor in one
 * of tcoll's own threads (its progress thread, TCOLL_PROGRESS=thread, and its bootstrap thread
 * call MPI holding tcoll's locks). Returns the calls it completed (Open MPI yields the core only
 * after turns without events, where it is told to). */
static int hook(void) {
  if (lay_in_tcoll || !lay_any_pending() || tcoll_layer_internal_thread()) return 0;
  if (only_mpi_thread && !pthread_equal(pthread_self(), mpi_thread)) return 0;
  int completed;
  lay_in_tcoll++;
  progress_pass(UINT64_MAX, &completed);
  lay_in_tcoll--;
  return completed;
}

#if defined(OPEN_MPI)
/* Whether an object loaded besides libtcoll and the layer needs libtcoll (the program calls tcoll
 * itself). Its DT_STRTAB is an address where the loader relocated it, else an offset. */
static int needs_libtcoll(struct dl_phdr_info *info, size_t size, void *found) {
  (void)size;
  if (!strncmp(lay_file_name(info->dlpi_name), "libtcoll", 8)) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
    const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    ElfW(Addr) strtab = 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
      if (d->d_tag == DT_STRTAB)
        strtab = d->d_un.d_ptr < info->dlpi_addr ? d->d_un.d_ptr + info->dlpi_addr : d->d_un.d_ptr;
    for (const ElfW(Dyn) *d = dyn; strtab && d->d_tag != DT_NULL; d++)
      if (d->d_tag == DT_NEEDED &&
          !strncmp((const char *)strtab + d->d_un.d_val, "libtcoll.so", 11)) {
        *(bool *)found = true;
        return 1;
      }
  }
  return 0;
}

#endif

/* ------------------------------------------------------------------ thread */

#define GRACE_NS (50 * 1000)
#define DRIVING_NAP_NS (20 * 1000)
#define YOUNG_NAP_NS (200 * 1000)
/* The longest nap while the program drives every call itself. Where each rank has a spare core
 * for the thread (tcoll_layer_spare_core), a wake-up takes nothing from the ranks; where not, it
 * takes a rank's core: on the 2-core CI machine at 2 ranks, a thread of the program's own that only
 * woke every 2 ms and slept again made MPICH's 2 MiB MPI_Reduce_scatter_block through the layer
 * 1.07x its time (about 60 us lost per wake-up), and the layer's 2 MiB MPI_Ireduce_scatter_block +
 * MPI_Wait took 1.10-1.11x its blocking form with 2 ms naps, 1.05x with 8 ms (the same phase of
 * the machine, medians of 4 rounds). So there the thread naps up to 8 ms: a call left undriven
 * after such a stretch waits up to 8 ms for its first test. */
#define BACKOFF_MAX_NS (2 * 1000 * 1000)
#define BACKOFF_MAX_CROWDED_NS (8 * 1000 * 1000)
static long backoff_max_ns = BACKOFF_MAX_NS;
#define IDLE_NS (2 * 1000 * 1000)
static pthread_t thread;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static bool stopping, sleeping; /* under lay_mu */

static void nap(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* Under lay_mu: whether every listed call is done or driven by another thread. */
static bool all_driven_elsewhere(void) {
  for (entry_t *e = lay_pending; e; e = e->next)
    if (!e->done && !e->claimed) return false;
  return true;
}

/* The next nap while the program drives every call itself: doubling from YOUNG_NAP_NS. */
static long longer(long backoff) {
  if (!backoff) return YOUNG_NAP_NS;
  return backoff * 2 < backoff_max_ns ? backoff * 2 : backoff_max_ns;
}

static void *progress_thread(void *arg) {
  (void)arg;
  uint64_t idle_since = lay_now_ns();
  long backoff = 0; /* the nap while the program drives every call itself; 0: not so */
  pthread_mutex_lock(&lay_mu);
  while (!stopping) {
    bool any = lay_pending != NULL;
    if (!any && lay_now_ns() - idle_since > IDLE_NS) {
      sleeping = true;
      pthread_cond_wait(&wake, &lay_mu);
      sleeping = false;
      idle_since = lay_now_ns();
      continue;
    }
    /* (an empty list between the program's calls keeps the back-off) */
    bool elsewhere = all_driven_elsewhere();
    pthread_mutex_unlock(&lay_mu);
    int completed, driven = any ? progress_pass(lay_now_ns() - GRACE_NS, &completed) : 0;
    if (any) idle_since = lay_now_ns();
    backoff = elsewhere && !driven ? longer(backoff) : 0;
    nap(driven ? DRIVING_NAP_NS : backoff ? backoff : YOUNG_NAP_NS);
    pthread_mutex_lock(&lay_mu);
  }
  pthread_mutex_unlock(&lay_mu);
  return NULL;
}

bool lay_progress_ages(void) { return running == LAY_PROGRESS_THREAD; }

void lay_progress_posted(void) {
  if (sleeping) pthread_cond_signal(&wake);
}

void lay_progress_listed(void) {
  if (running != LAY_PROGRESS_HOOK || __atomic_load_n(&hook_registered, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&register_mu);
  if (!hook_registered && opal_register(hook) == 0) /* 0: OPAL_SUCCESS */
    __atomic_store_n(&hook_registered, true, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&register_mu);
}

/* ------------------------------------------------------------------ choosing, starting */

lay_progress_t lay_progress_plan(void) {
  const char *v = getenv("TCOLL_MPI_PROGRESS");
  bool thread_asked = v && !strcasecmp(v, "thread");
  if (v && *v && !thread_asked && strcasecmp(v, "auto"))
    fprintf(stderr, "libtcoll-mpi.so: TCOLL_MPI_PROGRESS=%s is not auto or thread: using auto\n",
            v);
#if defined(OPEN_MPI)
  bool links_tcoll = false;
  dl_iterate_phdr(needs_libtcoll, &links_tcoll);
  opal_register = (int (*)(opal_callback_t))dlsym(RTLD_DEFAULT, "opal_progress_register");
  opal_unregister = (int (*)(opal_callback_t))dlsym(RTLD_DEFAULT, "opal_progress_unregister");
  if (!thread_asked && !links_tcoll && opal_register && opal_unregister) return LAY_PROGRESS_HOOK;
#endif
  return LAY_PROGRESS_THREAD;
}

int lay_progress_start(lay_progress_t how, int thread_level) {
  if (how == LAY_PROGRESS_HOOK) {
    /* Below MPI_THREAD_SERIALIZED only this thread calls MPI: an MPI built with a progress thread
     * of its own may run the loop there too, beside the program's thread inside tcoll. */
    mpi_thread = pthread_self();
    only_mpi_thread = thread_level < MPI_THREAD_SERIALIZED;
    if (!opal_register || !opal_unregister) return MPI_ERR_OTHER; /* found by lay_progress_plan */
  } else {
    stopping = false;
    backoff_max_ns = tcoll_layer_spare_core() ? BACKOFF_MAX_NS : BACKOFF_MAX_CROWDED_NS;
    if (pthread_create(&thread, NULL, progress_thread, NULL)) return MPI_ERR_OTHER;
  }
  running = how;
  return MPI_SUCCESS;
}

void lay_progress_stop(void) {
  if (running == LAY_PROGRESS_HOOK) {
    if (hook_registered) opal_unregister(hook);
    hook_registered = false;
  } else if (running == LAY_PROGRESS_THREAD) {
    pthread_mutex_lock(&lay_mu);
    stopping = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lay_mu);
    pthread_join(thread, NULL);
  }
  running = 0;
}

const char *lay_progress_name(void) {
  return !lay_nonblocking ? "none" : running == LAY_PROGRESS_HOOK ? "hook" : "thread";
}
