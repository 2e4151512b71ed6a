/* The NCCL-shaped bootstrap: tcoll_get_unique_id / tcoll_comm_init_rank.
 *
 * An id names its creating process (world rank) and carries a random nonce. Members register
 * with the creator over MPI point-to-point on a communicator reserved for this (a duplicate of
 * MPI_COMM_WORLD made at tcoll_init); the creator's rendezvous service (a thread when MPI gives
 * MPI_THREAD_MULTIPLE, else the creator's own init_rank call) collects nranks registrations,
 * checks them, and answers every member with the world ranks ordered by rank, or with the
 * error. The members then build the communicator with MPI_Comm_create_group. */
#include "comm.h"
#include "drive.h"
#include "bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define INVALID(...) tc_error(TCOLL_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* ------------------------------------------------------------------ the id */

#define ID_MAGIC "tcollUID"
#define ID_VERSION 1u
#define NONCE 24
/* byte offsets in the 128-byte id */
enum {
  OFF_MAGIC = 0,
  OFF_VERSION = 8,
  OFF_CREATOR = 12,
  OFF_WSIZE = 16,
  OFF_NONCE = 20,
  OFF_CHECK = 44,
  ID_USED = 52
};

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static unsigned nonce_hash(const unsigned char *nonce) {
  return (unsigned)(fnv1a(nonce, NONCE) >> 17);
}

typedef struct id_info {
  int creator, world_size;
  unsigned char nonce[NONCE];
} id_info_t;

static int parse_id(const void *id, size_t id_len, id_info_t *out) {
  if (!id)
    return INVALID("id is NULL (expected the %d bytes of a unique id)", TCOLL_UNIQUE_ID_BYTES);
  if (id_len != TCOLL_UNIQUE_ID_BYTES)
    return INVALID("invalid unique_id (expected %d bytes, got %zu)", TCOLL_UNIQUE_ID_BYTES, id_len);
  const unsigned char *b = id;
  uint32_t version;
  uint64_t check;
  memcpy(&version, b + OFF_VERSION, 4);
  memcpy(&check, b + OFF_CHECK, 8);
  bool tail_zero = true;
  for (int i = ID_USED; i < TCOLL_UNIQUE_ID_BYTES; i++) tail_zero = tail_zero && b[i] == 0;
  if (memcmp(b + OFF_MAGIC, ID_MAGIC, 8) != 0 || version != ID_VERSION ||
      check != fnv1a(b, OFF_CHECK) || !tail_zero)
    return INVALID("invalid unique_id (these %d bytes were not made by tcoll_get_unique_id)",
                   TCOLL_UNIQUE_ID_BYTES);
  int32_t creator, wsize;
  memcpy(&creator, b + OFF_CREATOR, 4);
  memcpy(&wsize, b + OFF_WSIZE, 4);
  if (wsize != tc_g.world_size || creator < 0 || creator >= wsize)
    return INVALID("invalid unique_id (made by world rank %d of %d, but this job has %d ranks)",
                   creator, wsize, tc_g.world_size);
  out->creator = creator;
  out->world_size = wsize;
  memcpy(out->nonce, b + OFF_NONCE, NONCE);
  return TCOLL_SUCCESS;
}

/* ------------------------------------------------------------------ messages */

enum {
  TAG_REGISTER = 7701,
  TAG_REPLY = 8000,
  TAG_REPLY_SPAN = 4096,
  TAG_GROUP = 20000,
  TAG_GROUP_SPAN = 9000
};
enum { REG_OK = 0, REG_BAD_RANK = 1, REG_BAD_NRANKS = 2, REG_BAD_COMM = 3 };

typedef struct reg_msg {
  unsigned char nonce[NONCE];
  int32_t nranks, rank, flags;
} reg_msg_t;

#define ERR_LEN 400
typedef struct reply_hdr {
  unsigned char nonce[NONCE];
  int32_t status, n;
  char err[ERR_LEN];
} reply_hdr_t; /* followed by n int32 world ranks, ordered by rank */

static MPI_Comm boot = MPI_COMM_NULL;

/* ------------------------------------------------------------------ the rendezvous service */

typedef enum { ID_OPEN, ID_DONE, ID_FAILED } id_state_t;

typedef struct boot_id {
  unsigned char nonce[NONCE];
  id_state_t state;
  int nranks, first_member, count;
  int *world_of; /* rank -> world rank, -1 while missing */
  int *members;  /* world ranks registered, in arrival order */
  int nmem, mem_cap;
  int arrived, expect; /* registrations so far (bad ones too); members expected (0: unknown) */
  double t_first, t_closed;
  char err[ERR_LEN];
  struct boot_id *next;
} boot_id_t;

static pthread_mutex_t srv_mu = PTHREAD_MUTEX_INITIALIZER;
static boot_id_t *ids;
static uint64_t id_counter;
static MPI_Request srv_req = MPI_REQUEST_NULL;
static reg_msg_t srv_msg;
static pthread_t srv_thread;
static bool srv_running, srv_stop;

static void reply(const unsigned char *nonce, int dest, int status, const char *err,
                  const int *ranks, int n) {
  size_t bytes = sizeof(reply_hdr_t) + (size_t)(status ? 0 : n) * sizeof(int32_t);
  reply_hdr_t *h = calloc(1, bytes);
  if (!h) return;
  memcpy(h->nonce, nonce, NONCE);
  h->status = status;
  h->n = status ? 0 : n;
  snprintf(h->err, sizeof h->err, "%s", err ? err : "");
  int32_t *r = (int32_t *)(h + 1);
  for (int i = 0; i < h->n; i++) r[i] = ranks[i];
  PMPI_Send(h, (int)bytes, MPI_BYTE, dest, TAG_REPLY + (int)(nonce_hash(nonce) % TAG_REPLY_SPAN),
            boot);
  free(h);
}

static void fail_id(boot_id_t *b, const char *fmt, ...) TC_PRINTF(2, 3);
static void fail_id(boot_id_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->err, sizeof b->err, fmt, ap);
  va_end(ap);
  b->state = ID_FAILED;
  b->t_closed = tc_now();
  for (int i = 0; i < b->nmem; i++)
    reply(b->nonce, b->members[i], TCOLL_ERR_INVALID_ARGUMENT, b->err, NULL, 0);
}

static void handle(const reg_msg_t *m, int src) {
  boot_id_t *b = ids;
  while (b && memcmp(b->nonce, m->nonce, NONCE) != 0) b = b->next;
  /* A member with bad arguments returned at once and waits for no answer: never send it one
   * (it would stay unreceived, and could be taken for the answer of a later rendezvous). */
  bool waits = m->flags == REG_OK;
  if (!b) {
    char err[ERR_LEN];
    snprintf(err, sizeof err,
             "invalid unique_id (world rank %d, named as its creator, did not make it)",
             tc_g.world_rank);
    if (waits) reply(m->nonce, src, TCOLL_ERR_INVALID_ARGUMENT, err, NULL, 0);
    return;
  }
  if (b->state != ID_OPEN) b->arrived++; /* late members count for settled() too */
  if (!waits && b->state != ID_OPEN) return;
  if (b->state == ID_FAILED) {
    reply(b->nonce, src, TCOLL_ERR_INVALID_ARGUMENT, b->err, NULL, 0);
    return;
  }
  if (b->state == ID_DONE) {
    char err[ERR_LEN];
    snprintf(err, sizeof err,
             "the unique id was already used: its %d ranks all joined, and world rank %d came as "
             "one more (rank %d)",
             b->nranks, src, m->rank);
    reply(b->nonce, src, TCOLL_ERR_INVALID_ARGUMENT, err, NULL, 0);
    return;
  }
  if (b->nmem == b->mem_cap) {
    int cap = b->mem_cap ? 2 * b->mem_cap : 8;
    int *p = realloc(b->members, (size_t)cap * sizeof *p);
    if (!p) {
      reply(b->nonce, src, TCOLL_ERR_NO_MEMORY, "the rendezvous root ran out of memory", NULL, 0);
      return;
    }
    b->members = p;
    b->mem_cap = cap;
  }
  if (b->nmem == 0 && b->state == ID_OPEN) b->t_first = tc_now();
  b->arrived++;
  if (!b->expect && m->nranks >= 1 && m->nranks <= tc_g.world_size) b->expect = m->nranks;
  if (m->flags == REG_OK)
    b->members[b->nmem++] = src; /* a member with bad arguments waits for no answer */
  if (m->flags == REG_BAD_NRANKS) {
    fail_id(b, "world rank %d called tcoll_comm_init_rank with nranks %d (expected 1..%d)", src,
            m->nranks, tc_g.world_size);
    return;
  }
  if (m->flags == REG_BAD_COMM) {
    fail_id(b, "world rank %d called tcoll_comm_init_rank with comm NULL (rank %d of %d)", src,
            m->rank, m->nranks);
    return;
  }
  if (m->flags == REG_BAD_RANK) {
    fail_id(b,
            "world rank %d called tcoll_comm_init_rank with rank %d for nranks %d (expected a rank "
            "in [0, %d))",
            src, m->rank, m->nranks, m->nranks);
    return;
  }
  if (!b->world_of) {
    b->nranks = m->nranks;
    b->first_member = src;
    b->world_of = malloc((size_t)m->nranks * sizeof *b->world_of);
    if (!b->world_of) {
      fail_id(b, "the rendezvous root ran out of memory");
      return;
    }
    for (int i = 0; i < m->nranks; i++) b->world_of[i] = -1;
  }
  if (m->nranks != b->nranks) {
    fail_id(b, "members disagree on nranks: world rank %d passed %d, world rank %d passed %d",
            b->first_member, b->nranks, src, m->nranks);
    return;
  }
  if (b->world_of[m->rank] >= 0) {
    fail_id(b,
            "duplicate rank %d: world ranks %d and %d both passed it (expected each rank in [0, "
            "%d) once)",
            m->rank, b->world_of[m->rank], src, b->nranks);
    return;
  }
  b->world_of[m->rank] = src;
  if (++b->count == b->nranks) {
    b->state = ID_DONE;
    b->t_closed = tc_now();
    for (int i = 0; i < b->nmem; i++)
      reply(b->nonce, b->members[i], TCOLL_SUCCESS, NULL, b->world_of, b->nranks);
  }
}

static void check_timeouts(void) {
  if (tc_cfg.timeout <= 0) return;
  double now = tc_now();
  for (boot_id_t *b = ids; b; b = b->next) {
    if (b->state != ID_OPEN || b->nmem == 0 || now - b->t_first < tc_cfg.timeout) continue;
    char missing[160] = "";
    size_t off = 0;
    for (int r = 0; b->world_of && r < b->nranks && off < sizeof missing - 16; r++)
      if (b->world_of[r] < 0)
        off += (size_t)snprintf(missing + off, sizeof missing - off, "%s%d", off ? ", " : "", r);
    fail_id(b, "rendezvous timed out after %g s: %d of %d ranks joined (missing: %s)",
            tc_cfg.timeout, b->count, b->nranks, missing);
  }
}

/* One round of the service: takes at most one registration. Returns whether it did any. */
static bool srv_step(void) {
  bool got = false;
  pthread_mutex_lock(&srv_mu);
  if (boot != MPI_COMM_NULL) {
    if (srv_req == MPI_REQUEST_NULL)
      PMPI_Irecv(&srv_msg, (int)sizeof srv_msg, MPI_BYTE, MPI_ANY_SOURCE, TAG_REGISTER, boot,
                 &srv_req);
    int flag = 0;
    MPI_Status st;
    if (srv_req != MPI_REQUEST_NULL && PMPI_Test(&srv_req, &flag, &st) == MPI_SUCCESS && flag) {
      reg_msg_t m = srv_msg;
      handle(&m, st.MPI_SOURCE);
      got = true;
    }
    check_timeouts();
  }
  pthread_mutex_unlock(&srv_mu);
  return got;
}

/* Without a bootstrap thread the creator answers from inside its own init_rank call: it keeps
 * answering until every expected member came (or a grace period after the rendezvous closed),
 * so that members arriving after a failure still get their error. */
#define SETTLE_GRACE 5.0
static bool settled(const unsigned char *nonce) {
  pthread_mutex_lock(&srv_mu);
  boot_id_t *b = ids;
  while (b && memcmp(b->nonce, nonce, NONCE) != 0) b = b->next;
  bool done = !b || (b->state != ID_OPEN &&
                     (b->arrived >= b->expect || tc_now() - b->t_closed > SETTLE_GRACE));
  pthread_mutex_unlock(&srv_mu);
  return done;
}

static void nap(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void *srv_main(void *arg) {
  TC_UNUSED(arg);
  tc_enter("tcoll bootstrap thread");
  tc_mark_internal_thread();
  long idle = 0;
  for (;;) {
    pthread_mutex_lock(&srv_mu);
    bool stop = srv_stop;
    pthread_mutex_unlock(&srv_mu);
    if (stop) break;
    if (srv_step()) {
      idle = 0;
      continue;
    }
    /* Poll often while a rendezvous may be on, rarely otherwise: light on shared cores. */
    idle = idle < 1000 ? idle + 50 : 1000;
    nap(idle);
  }
  return NULL;
}

static int srv_ensure_thread(void) {
  if (tc_g.thread_level < MPI_THREAD_MULTIPLE) return TCOLL_SUCCESS; /* creator answers inline */
  pthread_mutex_lock(&srv_mu);
  int rc = TCOLL_SUCCESS;
  if (!srv_running) {
    srv_stop = false;
    if (pthread_create(&srv_thread, NULL, srv_main, NULL) == 0)
      srv_running = true;
    else
      rc = tc_error(TCOLL_ERR_INTERNAL, "cannot start the bootstrap thread");
  }
  pthread_mutex_unlock(&srv_mu);
  return rc;
}

/* ------------------------------------------------------------------ lifetime */

int tc_bootstrap_init(void) {
  int rc = PMPI_Comm_dup(MPI_COMM_WORLD, &boot);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_dup(MPI_COMM_WORLD) for the bootstrap");
  PMPI_Comm_set_errhandler(boot, MPI_ERRORS_RETURN);
  return TCOLL_SUCCESS;
}

void tc_bootstrap_fini(void) {
  pthread_mutex_lock(&srv_mu);
  bool running = srv_running;
  srv_stop = true;
  pthread_mutex_unlock(&srv_mu);
  if (running) pthread_join(srv_thread, NULL);
  pthread_mutex_lock(&srv_mu);
  srv_running = false;
  if (srv_req != MPI_REQUEST_NULL) {
    PMPI_Cancel(&srv_req);
    PMPI_Wait(&srv_req, MPI_STATUS_IGNORE);
  }
  while (ids) {
    boot_id_t *b = ids;
    ids = b->next;
    free(b->world_of);
    free(b->members);
    free(b);
  }
  int fin = 0;
  PMPI_Finalized(&fin);
  if (boot != MPI_COMM_NULL && !fin) PMPI_Comm_free(&boot);
  boot = MPI_COMM_NULL;
  pthread_mutex_unlock(&srv_mu);
}

/* ------------------------------------------------------------------ the public API */

static void random_bytes(unsigned char *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = getrandom(p + got, n - got, 0);
    if (k <= 0) break;
    got += (size_t)k;
  }
  if (got < n) { /* no entropy source: time, pid and address bits, mixed */
    uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)p ^
                 (uint64_t)(tc_now() * 1e9);
    for (size_t i = got; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      p[i] = (unsigned char)x;
    }
  }
}

int tcoll_get_unique_id(tcoll_unique_id_t *id) {
  TC_ENTER("tcoll_get_unique_id");
  int rc = tc_require_init();
  if (rc) return rc;
  if (!id) return INVALID("id is NULL (expected where to store the unique id)");
  boot_id_t *b = calloc(1, sizeof *b);
  if (!b) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate a unique id");
  random_bytes(b->nonce, 16);
  uint64_t k = __atomic_add_fetch(&id_counter, 1, __ATOMIC_RELAXED);
  memcpy(b->nonce + 16, &k, 8);
  b->state = ID_OPEN;
  if ((rc = srv_ensure_thread())) {
    free(b);
    return rc;
  }
  pthread_mutex_lock(&srv_mu);
  b->next = ids;
  ids = b;
  pthread_mutex_unlock(&srv_mu);
  unsigned char *o = (unsigned char *)id->bytes;
  memset(o, 0, TCOLL_UNIQUE_ID_BYTES);
  memcpy(o + OFF_MAGIC, ID_MAGIC, 8);
  uint32_t version = ID_VERSION;
  int32_t creator = tc_g.world_rank, wsize = tc_g.world_size;
  memcpy(o + OFF_VERSION, &version, 4);
  memcpy(o + OFF_CREATOR, &creator, 4);
  memcpy(o + OFF_WSIZE, &wsize, 4);
  memcpy(o + OFF_NONCE, b->nonce, NONCE);
  uint64_t check = fnv1a(o, OFF_CHECK);
  memcpy(o + OFF_CHECK, &check, 8);
  return TCOLL_SUCCESS;
}

/* Builds the members' communicator from the world ranks ordered by rank. */
static int build_comm(const int32_t *world_of, int nranks, const unsigned char *nonce, int rank,
                      tcoll_comm_t **out) {
  MPI_Group wg, g;
  int *ranks = malloc((size_t)nranks * sizeof *ranks);
  if (!ranks) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate %d ranks", nranks);
  for (int i = 0; i < nranks; i++) ranks[i] = world_of[i];
  PMPI_Comm_group(boot, &wg);
  int rc = PMPI_Group_incl(wg, nranks, ranks, &g);
  free(ranks);
  PMPI_Group_free(&wg);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Group_incl");
  MPI_Comm newc = MPI_COMM_NULL;
  rc =
      PMPI_Comm_create_group(boot, g, TAG_GROUP + (int)(nonce_hash(nonce) % TAG_GROUP_SPAN), &newc);
  PMPI_Group_free(&g);
  if (rc != MPI_SUCCESS) return tc_mpi_error(rc, "MPI_Comm_create_group");
  int me = -1;
  PMPI_Comm_rank(newc, &me);
  if (me != rank) {
    PMPI_Comm_free(&newc);
    return tc_error(TCOLL_ERR_INTERNAL, "the new communicator gives rank %d, expected %d", me,
                    rank);
  }
  rc = tc_comm_wrap(newc, TC_COMM_USER, out);
  if (rc) PMPI_Comm_free(&newc);
  return rc;
}

int tcoll_comm_init_rank(tcoll_comm_t **comm, int nranks, const void *id, size_t id_len, int rank) {
  TC_ENTER("tcoll_comm_init_rank");
  int rc = tc_require_init();
  if (rc) return rc;
  id_info_t info;
  if ((rc = parse_id(id, id_len, &info))) return rc; /* nobody to tell: the id is unusable */
  reg_msg_t m;
  memset(&m, 0, sizeof m);
  memcpy(m.nonce, info.nonce, NONCE);
  m.nranks = nranks;
  m.rank = rank;
  m.flags = REG_OK;
  /* A bad rank or nranks is reported to the root too, so that the other members fail instead
   * of waiting for this one forever. */
  if (nranks < 1 || nranks > tc_g.world_size) {
    m.flags = REG_BAD_NRANKS;
    rc = INVALID("nranks is %d (expected 1..%d, the world size)", nranks, tc_g.world_size);
  } else if (rank < 0 || rank >= nranks) {
    m.flags = REG_BAD_RANK;
    rc = INVALID("rank is %d (expected a rank in [0, %d))", rank, nranks);
  } else if (!comm) {
    m.flags = REG_BAD_COMM;
    rc = INVALID("comm is NULL (expected where to store the communicator)");
  }
  if (rc) {
    PMPI_Send(&m, (int)sizeof m, MPI_BYTE, info.creator, TAG_REGISTER, boot);
    if (info.creator == tc_g.world_rank && !srv_running) {
      char keep[1024]; /* no bootstrap thread: answer the others before returning */
      snprintf(keep, sizeof keep, "%s", tcoll_last_error());
      double until = tc_cfg.timeout > 0 ? tc_now() + tc_cfg.timeout : 0.0;
      while (!settled(info.nonce) && (until == 0.0 || tc_now() < until))
        if (!srv_step()) nap(200);
      const char *msg = strstr(keep, ": ");
      tc_error(rc, "%s", msg ? msg + 2 : keep);
    }
    return rc;
  }
  size_t cap = sizeof(reply_hdr_t) + (size_t)tc_g.world_size * sizeof(int32_t);
  reply_hdr_t *h = calloc(1, cap);
  if (!h) return tc_error(TCOLL_ERR_NO_MEMORY, "cannot allocate the rendezvous reply");
  MPI_Request req;
  rc = PMPI_Irecv(h, (int)cap, MPI_BYTE, info.creator,
                  TAG_REPLY + (int)(nonce_hash(info.nonce) % TAG_REPLY_SPAN), boot, &req);
  if (rc == MPI_SUCCESS)
    rc = PMPI_Send(&m, (int)sizeof m, MPI_BYTE, info.creator, TAG_REGISTER, boot);
  if (rc != MPI_SUCCESS) {
    free(h);
    return tc_mpi_error(rc, "sending the registration to the rendezvous root");
  }
  double deadline = tc_cfg.timeout > 0 ? tc_now() + tc_cfg.timeout + 1.0 : 0.0;
  bool serve = info.creator == tc_g.world_rank && !srv_running, answered = false;
  long idle = 0;
  for (;;) {
    if (serve && srv_step()) idle = 0;
    tc_drive_all(); /* the other members may wait for this rank's steps before they register */
    int flag = 0;
    if (!answered && (rc = PMPI_Test(&req, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS) {
      free(h);
      return tc_mpi_error(rc, "waiting for the rendezvous root");
    }
    answered = answered || flag;
    if (answered && (!serve || settled(info.nonce))) break;
    if (answered) { /* serving the others: the own answer is in */
      nap(100);
      continue;
    }
    if (deadline > 0 && tc_now() > deadline) {
      PMPI_Cancel(&req);
      PMPI_Wait(&req, MPI_STATUS_IGNORE);
      free(h);
      return tc_error(TCOLL_ERR_TIMEOUT,
                      "no answer from the rendezvous root (world rank %d) within %g s (is it "
                      "running tcoll, and with "
                      "MPI_THREAD_MULTIPLE or as a member?)",
                      info.creator, tc_cfg.timeout);
    }
    idle = idle < 500 ? idle + 20 : 500;
    nap(idle);
  }
  if (memcmp(h->nonce, info.nonce, NONCE) != 0) {
    free(h);
    return tc_error(TCOLL_ERR_INTERNAL, "the rendezvous root answered for another unique id");
  }
  if (h->status != TCOLL_SUCCESS) {
    h->err[ERR_LEN - 1] = '\0';
    rc = tc_error(h->status, "%s", h->err);
    free(h);
    return rc;
  }
  rc = build_comm((const int32_t *)(h + 1), h->n, info.nonce, rank, comm);
  free(h);
  return rc;
}
