/* processes/rendezvous.h - 10.3 Processes: rendezvous (every rank gets rank 0's communicator id)
   may call: what its includes name (common/, config/, formats/, processes/) */
#ifndef GPT2RT__SRC_PROCESSES_RENDEZVOUS_H
#define GPT2RT__SRC_PROCESSES_RENDEZVOUS_H
#include "../common/threads.h"
#include "../common/errors.h"
#include "../config/config.h"
#include "../config/caps.h"
#include "../formats/safetensors_write.h"
#include "mpi.h"

/* ==== 10.3 Processes: rendezvous ==== */
/* A run of world_size processes (torchrun, mpirun, a cluster's scheduler) starts with
   a rendezvous: rank 0's opaque id (128 bytes: what ncclCommInitRank needs, its
   ncclUniqueId) reaches every rank, and every rank learns that all the others are
   there. Three ways, as torch.distributed offers them:
   - TCP (rendezvous ENV or TCP): rank 0 listens on master_addr:master_port; the
     others connect (refused connections are retried until the timeout: rank 0 may
     start last), say (world_size, rank), and get the id once every rank is there.
   - FILE: rank 0 creates rendezvous_file (with link(), so it appears whole and only
     once: a file left by a crashed run is refused by name, never read as new); each
     other rank reads it and leaves rendezvous_file.ack<rank>; rank 0 waits for every
     ack and then removes them, which tells each rank that the rendezvous succeeded.
   - MPI: a broadcast from rank 0 (GPT2RT_MPI builds).
   Each waits at most timeout_s and then fails naming the ranks that did not come: a
   rank that dies before the rendezvous makes the others return an error, never hang.
   The CPU backend needs no id: its processes reduce with MPI (gpt2rt__mpi_comm). */

#define GPT2RT__RDV_MAGIC 0x74723267u /* "g2rt" little-endian */

#if !defined(_WIN32) && !defined(GPT2RT_NO_DIST)
/* milliseconds left before deadline (seconds, gpt2rt__now's clock), at least 0 */
static int gpt2rt__rdv_left_ms(double deadline) {
    double left = (deadline - gpt2rt__now()) * 1e3;
    return left <= 0.0 ? 0 : left > 1e9 ? 1000000000 : (int)left + 1;
}

static void gpt2rt__rdv_sleep_ms(int ms) { (void)poll(NULL, 0, ms); } /* nanosleep is not C11 */

/* all n bytes through fd (want POLLOUT: send, else receive) before deadline: 1 done,
   0 timed out, -1 the peer closed or the socket failed */
static int gpt2rt__rdv_io(int fd, void *buf, size_t n, int out, double deadline) {
    unsigned char *p = (unsigned char *)buf;
    size_t done = 0;
    while (done < n) {
        struct pollfd pf;
        pf.fd = fd; pf.events = (short)(out ? POLLOUT : POLLIN); pf.revents = 0;
        int left = gpt2rt__rdv_left_ms(deadline);
        if (left == 0) return 0;
        int k = poll(&pf, 1, left);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return 0;
#ifdef MSG_NOSIGNAL /* a peer that died must not kill this process with SIGPIPE */
        ssize_t m = out ? send(fd, p + done, n - done, MSG_NOSIGNAL) : recv(fd, p + done, n - done, 0);
#else
        ssize_t m = out ? send(fd, p + done, n - done, 0) : recv(fd, p + done, n - done, 0);
#endif
        if (m < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (m <= 0) return -1;
        done += (size_t)m;
    }
    return 1;
}

/* master_addr as an IPv4 address: numeric, "localhost", or (where the C library
   declares getaddrinfo: POSIX 2001, i.e. not strict -std=c11) a host name */
static gpt2rt_result gpt2rt__rdv_addr(const gpt2rt_config *c, struct sockaddr_in *a, char *err, size_t cap) {
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)c->master_port);
    const char *host = strcmp(c->master_addr, "localhost") ? c->master_addr : "127.0.0.1";
    if (inet_pton(AF_INET, host, &a->sin_addr) == 1) return GPT2RT_OK;
#if defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200112L
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(host, NULL, &hints, &res);
    if (e == 0 && res) {
        memcpy(&a->sin_addr, &((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr, sizeof a->sin_addr);
        freeaddrinfo(res);
        return GPT2RT_OK;
    }
    GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "master_addr (MASTER_ADDR) = '%s' does not resolve to an IPv4 address "
                "(%s)", c->master_addr, gai_strerror(e));
#else
    GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "master_addr (MASTER_ADDR) = '%s' is not a numeric IPv4 address, and "
                "this build cannot resolve host names (compile the implementation file without strict -std=c11, or "
                "with -D_POSIX_C_SOURCE=200112L); give rank 0's IP address", c->master_addr);
#endif
}

/* the 16-byte hello a rank sends rank 0, and rank 0's answer */
typedef struct gpt2rt__rdv_hello { uint32_t magic, world, rank, pad; } gpt2rt__rdv_hello;
typedef struct gpt2rt__rdv_reply {
    uint32_t status, world;                  /* status 0: ok, 1: world_size differs, 2: rank taken or out of range */
    unsigned char id[GPT2RT__RDV_ID_BYTES];
} gpt2rt__rdv_reply;

static gpt2rt_result gpt2rt__rdv_tcp_root(const gpt2rt_config *c, const struct sockaddr_in *a,
                                          const unsigned char *id, char *err, size_t cap) {
    double deadline = gpt2rt__now() + c->timeout_s;
    int peers[GPT2RT__RDV_MAX_PEERS], n_in = 0, one = 1, w = c->world_size;
    for (int i = 0; i < w && i < GPT2RT__RDV_MAX_PEERS; i++) peers[i] = -1;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0) GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: socket() failed: %s", strerror(errno));
    struct sockaddr_in any = *a;
    any.sin_addr.s_addr = htonl(INADDR_ANY); /* MASTER_ADDR names this host; listen on all of its addresses */
    (void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&any, sizeof any) != 0 || listen(lfd, w) != 0) {
        int e = errno;
        close(lfd);
        GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: rank 0 cannot listen on port %d (MASTER_PORT): %s%s", c->master_port,
                    strerror(e), e == EADDRINUSE ? ": another job, or a previous run's rank 0, holds it; choose "
                    "another MASTER_PORT" : "");
    }
    (void)fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    gpt2rt_result r = GPT2RT_OK;
    while (n_in < w - 1) {
        struct pollfd pf;
        pf.fd = lfd; pf.events = POLLIN; pf.revents = 0;
        int left = gpt2rt__rdv_left_ms(deadline);
        if (left == 0 || poll(&pf, 1, left) == 0) {
            size_t k = (size_t)snprintf(err, cap, "rendezvous timed out after %g s: rank 0 listens on %s:%d, and "
                                        "rank(s)", (double)c->timeout_s, c->master_addr, c->master_port);
            for (int i = 1, shown = 0; i < w && k < cap; i++)
                if (peers[i] < 0 && shown++ < 16) k += (size_t)snprintf(err + k, cap - k, " %d", i);
            if (k < cap)
                snprintf(err + k, cap - k, " of world_size = %d did not come (not started, crashed, or given another "
                         "MASTER_ADDR/MASTER_PORT or WORLD_SIZE)", w);
            r = GPT2RT_ERR_IO;
            break;
        }
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue; /* EAGAIN: the connection went away */
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        gpt2rt__rdv_hello h;
        double hd = gpt2rt__now() + 10.0 < deadline ? gpt2rt__now() + 10.0 : deadline;
        if (gpt2rt__rdv_io(fd, &h, sizeof h, 0, hd) != 1 || h.magic != GPT2RT__RDV_MAGIC) { close(fd); continue; }
        gpt2rt__rdv_reply rep;
        memset(&rep, 0, sizeof rep);
        rep.world = (uint32_t)w;
        if (h.world != (uint32_t)w) rep.status = 1;
        else if (h.rank == 0 || h.rank >= (uint32_t)w || peers[h.rank] >= 0) rep.status = 2;
        if (rep.status) {
            (void)gpt2rt__rdv_io(fd, &rep, sizeof rep, 1, hd);
            close(fd);
            if (rep.status == 1)
                snprintf(err, cap, "rendezvous: rank %u has world_size = %u, rank 0 has %d: every process must get "
                         "the same WORLD_SIZE", h.rank, h.world, w);
            else
                snprintf(err, cap, "rendezvous: a second process says it is rank %u (or rank %u is outside [1, %d]): "
                         "every process needs its own RANK", h.rank, h.rank, w - 1);
            r = GPT2RT_ERR_INVALID_ARGUMENT;
            break;
        }
        peers[h.rank] = fd;
        n_in++;
    }
    for (int i = 1; i < w; i++) {
        if (peers[i] < 0) continue;
        if (r == GPT2RT_OK) {
            gpt2rt__rdv_reply rep;
            memset(&rep, 0, sizeof rep);
            rep.world = (uint32_t)w;
            memcpy(rep.id, id, GPT2RT__RDV_ID_BYTES);
            if (gpt2rt__rdv_io(peers[i], &rep, sizeof rep, 1, deadline) != 1) {
                snprintf(err, cap, "rendezvous: rank %d went away before rank 0 could send it the id", i);
                r = GPT2RT_ERR_IO;
            }
        }
        close(peers[i]); /* on failure: the others see the connection close and fail too */
    }
    close(lfd);
    return r;
}

static gpt2rt_result gpt2rt__rdv_tcp_peer(const gpt2rt_config *c, const struct sockaddr_in *a, unsigned char *id,
                                          char *err, size_t cap) {
    double deadline = gpt2rt__now() + c->timeout_s;
    int refused = 0;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: socket() failed: %s", strerror(errno));
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        int ok = connect(fd, (const struct sockaddr *)a, sizeof *a) == 0, e = errno;
        if (!ok && e == EINPROGRESS) { /* wait for the answer, at most a second a try */
            struct pollfd pf;
            pf.fd = fd; pf.events = POLLOUT; pf.revents = 0;
            int left = gpt2rt__rdv_left_ms(deadline);
            if (poll(&pf, 1, left < 1000 ? left : 1000) == 1) {
                socklen_t len = sizeof e;
                e = 0;
                (void)getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
                ok = e == 0;
            } else e = ETIMEDOUT;
        }
        if (ok) {
            gpt2rt__rdv_hello h;
            gpt2rt__rdv_reply rep;
            h.magic = GPT2RT__RDV_MAGIC; h.world = (uint32_t)c->world_size; h.rank = (uint32_t)c->rank; h.pad = 0;
            int got = gpt2rt__rdv_io(fd, &h, sizeof h, 1, deadline);
            if (got == 1) got = gpt2rt__rdv_io(fd, &rep, sizeof rep, 0, deadline);
            close(fd);
            if (got == 0)
                GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous timed out after %g s: rank %d reached rank 0 at %s:%d, but "
                            "rank 0 did not hear from every rank of world_size = %d (one not started or crashed?)",
                            (double)c->timeout_s, c->rank, c->master_addr, c->master_port, c->world_size);
            if (got < 0)
                GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: rank 0 at %s:%d closed the connection before sending the id "
                            "(rank 0 failed, or refused this rank: its error says why)", c->master_addr,
                            c->master_port);
            if (rep.status == 1)
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous: rank 0 has world_size = %u, this rank %d has "
                            "%d: every process must get the same WORLD_SIZE", rep.world, c->rank, c->world_size);
            if (rep.status)
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous: rank 0 refused rank %d: another process has "
                            "it (every process needs its own RANK)", c->rank);
            memcpy(id, rep.id, GPT2RT__RDV_ID_BYTES);
            return GPT2RT_OK;
        }
        close(fd);
        refused++;
        int left = gpt2rt__rdv_left_ms(deadline);
        if (left == 0)
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous timed out after %g s: rank %d could not reach rank 0 at %s:%d "
                        "(%d tries, last: %s); is rank 0 running, with the same MASTER_ADDR and MASTER_PORT, and is "
                        "the port open between the nodes?", (double)c->timeout_s, c->rank, c->master_addr,
                        c->master_port, refused, strerror(e));
        gpt2rt__rdv_sleep_ms(left < 100 ? left : 100); /* rank 0 may not listen yet */
    }
}

/* FILE: see the subsection's comment for the protocol */
static void gpt2rt__rdv_file_name(char *out, size_t cap, const gpt2rt_config *c, const char *what, int r) {
    if (r >= 0) snprintf(out, cap, "%s.%s%d", c->rendezvous_file, what, r);
    else snprintf(out, cap, "%s%s", c->rendezvous_file, what);
}

static int gpt2rt__rdv_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* path := bytes, appearing whole: written to a temporary name, then linked (fails
   with EEXIST if path is there). The temporary is opened non-blocking: a FIFO left
   at its name fails at once (ENXIO) instead of waiting for a reader. */
static int gpt2rt__rdv_publish(const char *path, const char *tmp, const void *bytes, size_t n) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK, 0644);
    if (fd < 0) return -1;
    struct stat sb;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode), mine = ok; /* never remove what is not a file */
    if (!ok) errno = EINVAL;
    for (size_t done = 0; ok && done < n;) {
        long k = (long)write(fd, (const char *)bytes + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { ok = 0; break; }
        done += (size_t)k;
    }
    int e = errno;
    if (close(fd) != 0 && ok) { ok = 0; e = errno; }
    if (ok && link(tmp, path) != 0) { ok = errno == EEXIST ? -2 : 0; e = errno; }
    if (mine) remove(tmp);
    errno = e;
    return ok == 1 ? 0 : ok == -2 ? -2 : -1;
}

/* what is at path when it is not a regular file ("a directory", "a FIFO (named
   pipe)", ...), NULL for a regular file or nothing */
static const char *gpt2rt__rdv_not_file(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return NULL;
    return gpt2rt__file_kind((unsigned)sb.st_mode);
}

static gpt2rt_result gpt2rt__rdv_file(const gpt2rt_config *c, unsigned char *id, char *err, size_t cap) {
    double deadline = gpt2rt__now() + c->timeout_s;
    char path[300], tmp[320], ack[320];
    gpt2rt__rdv_file_name(path, sizeof path, c, "", -1);
    gpt2rt__rdv_reply rec; /* the file: world_size and the id */
    int w = c->world_size;
    if (c->rank == 0) {
        memset(&rec, 0, sizeof rec);
        rec.status = GPT2RT__RDV_MAGIC; rec.world = (uint32_t)w;
        memcpy(rec.id, id, GPT2RT__RDV_ID_BYTES);
        gpt2rt__rdv_file_name(tmp, sizeof tmp, c, "tmp", 0);
        const char *kind = gpt2rt__rdv_not_file(path);
        if (kind)
            GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous_file %s is %s: give every rank the path of a file "
                        "rank 0 can create, absent before the run%s%s%s", path, kind,
                        strcmp(kind, "a directory") ? "" : " (e.g. ", strcmp(kind, "a directory") ? "" : path,
                        strcmp(kind, "a directory") ? "" : "/gpt2rt.rdv)");
        int p = gpt2rt__rdv_publish(path, tmp, &rec, sizeof rec);
        if (p == -2)
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous_file %s exists already (left by an earlier run, or another job "
                        "uses it): delete it, or give each run a fresh path", path);
        if (p)
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous_file %s: cannot create it: %s", path, strerror(errno));
        int waiting = w - 1;
        while (waiting > 0) {
            waiting = 0;
            for (int i = 1; i < w; i++) {
                gpt2rt__rdv_file_name(ack, sizeof ack, c, "ack", i);
                waiting += !gpt2rt__rdv_exists(ack);
            }
            if (waiting == 0) break;
            if (gpt2rt__rdv_left_ms(deadline) == 0) {
                remove(path); /* the acks stay: the ranks that came see the file go with theirs there, and fail */
                size_t k = (size_t)snprintf(err, cap, "rendezvous timed out after %g s: rank(s)", (double)c->timeout_s);
                for (int i = 1, shown = 0; i < w && k < cap; i++) {
                    gpt2rt__rdv_file_name(ack, sizeof ack, c, "ack", i);
                    if (!gpt2rt__rdv_exists(ack) && shown++ < 16) k += (size_t)snprintf(err + k, cap - k, " %d", i);
                }
                if (k < cap)
                    snprintf(err + k, cap - k, " of world_size = %d did not read rendezvous_file %s (not started, "
                             "crashed, or given another path or WORLD_SIZE)", w, path);
                return GPT2RT_ERR_IO;
            }
            gpt2rt__rdv_sleep_ms(20);
        }
        for (int i = 1; i < w; i++) { /* success, as each rank sees it: its ack is gone */
            gpt2rt__rdv_file_name(ack, sizeof ack, c, "ack", i);
            remove(ack);
        }
        remove(path);
        return GPT2RT_OK;
    }
    int open_errno = ENOENT;
    for (;;) { /* read the id; opened non-blocking, so a FIFO or a directory is refused at once */
        int fd = open(path, O_RDONLY | O_NONBLOCK);
        if (fd >= 0) {
            struct stat sb;
            if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
                close(fd);
                const char *kind = gpt2rt__file_kind((unsigned)sb.st_mode);
                int dir = !strcmp(kind, "a directory");
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous_file %s is %s, not a file rank 0 wrote: give "
                            "every rank the path of a file rank 0 can create%s%s%s", path, kind, dir ? " (e.g. " : "",
                            dir ? path : "", dir ? "/gpt2rt.rdv)" : "");
            }
            size_t got = 0;
            while (got < sizeof rec) {
                long k = (long)read(fd, (unsigned char *)&rec + got, sizeof rec - got);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) break;
                got += (size_t)k;
            }
            close(fd);
            if (got != sizeof rec || rec.status != GPT2RT__RDV_MAGIC)
                GPT2RT__BAD(GPT2RT_ERR_FORMAT, "rendezvous_file %s is not a gpt2rt rendezvous file (%zu bytes): "
                            "another program's file? delete it, or choose another path", path, got);
            if (rec.world != (uint32_t)w)
                GPT2RT__BAD(GPT2RT_ERR_INVALID_ARGUMENT, "rendezvous_file %s: rank 0 has world_size = %u, rank %d "
                            "has %d: every process must get the same WORLD_SIZE (or the file is an earlier run's: "
                            "delete it)", path, rec.world, c->rank, w);
            break;
        }
        open_errno = errno;
        if (gpt2rt__rdv_left_ms(deadline) == 0)
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous timed out after %g s: rank %d waited for rank 0 to create "
                        "rendezvous_file %s (is rank 0 running, with the same path on a file system both see?)%s%s",
                        (double)c->timeout_s, c->rank, path, open_errno == ENOENT ? "" : "; opening it: ",
                        open_errno == ENOENT ? "" : strerror(open_errno));
        gpt2rt__rdv_sleep_ms(20);
    }
    gpt2rt__rdv_file_name(ack, sizeof ack, c, "ack", c->rank);
    gpt2rt__rdv_file_name(tmp, sizeof tmp, c, "tmp", c->rank);
    int p = gpt2rt__rdv_publish(ack, tmp, "ok", 2);
    if (p)
        GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: rank %d cannot create %s: %s", c->rank, ack,
                    p == -2 ? "it exists (another process with the same RANK, or an earlier run's: delete it)"
                            : strerror(errno));
    for (;;) { /* rank 0 removes the ack when every rank has come */
        if (!gpt2rt__rdv_exists(ack)) break;
        if (!gpt2rt__rdv_exists(path)) {
            remove(ack);
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous: rank 0 gave up (rendezvous_file %s went away before every rank "
                        "came: its error names the missing ranks)", path);
        }
        if (gpt2rt__rdv_left_ms(deadline) == 0) {
            remove(ack);
            GPT2RT__BAD(GPT2RT_ERR_IO, "rendezvous timed out after %g s: rank %d read rendezvous_file %s but rank 0 "
                        "did not confirm that every rank came (rank 0 crashed, or another rank is missing)",
                        (double)c->timeout_s, c->rank, path);
        }
        gpt2rt__rdv_sleep_ms(20);
    }
    memcpy(id, rec.id, GPT2RT__RDV_ID_BYTES);
    return GPT2RT_OK;
}
#endif /* !_WIN32 && !GPT2RT_NO_DIST */

/* Every rank gets rank 0's id: id (GPT2RT__RDV_ID_BYTES) is rank 0's input and the
   others' output. One process: nothing to do. */
GPT2RT__MAYBE_UNUSED static gpt2rt_result gpt2rt__rdv_exchange(const gpt2rt_config *c, unsigned char *id, char *err, size_t cap) {
    if (c->world_size <= 1) return GPT2RT_OK;
#ifdef GPT2RT_NO_DIST
    (void)id; /* config resolution refuses world_size > 1 in such a build */
#endif
    gpt2rt_result r = gpt2rt__cap_processes(c->world_size, "rendezvous of world_size =", err, cap);
    if (r != GPT2RT_OK) return r;
#ifdef GPT2RT_MPI
    if (c->rendezvous == GPT2RT_RENDEZVOUS_MPI) return gpt2rt__mpi_bcast_id(c, id, err, cap);
#endif
#if !defined(_WIN32) && !defined(GPT2RT_NO_DIST)
    if (c->rendezvous == GPT2RT_RENDEZVOUS_FILE) return gpt2rt__rdv_file(c, id, err, cap);
    if (c->rendezvous == GPT2RT_RENDEZVOUS_ENV || c->rendezvous == GPT2RT_RENDEZVOUS_TCP) {
        struct sockaddr_in a;
        if ((r = gpt2rt__rdv_addr(c, &a, err, cap)) != GPT2RT_OK) return r;
        return c->rank == 0 ? gpt2rt__rdv_tcp_root(c, &a, id, err, cap) : gpt2rt__rdv_tcp_peer(c, &a, id, err, cap);
    }
#endif
    GPT2RT__BAD(GPT2RT_ERR_UNAVAILABLE, "rendezvous = %d is not available in this build (TCP and FILE need a POSIX "
                "system and no GPT2RT_NO_DIST; MPI needs -DGPT2RT_MPI)", (int)c->rendezvous);
}

#endif /* GPT2RT__SRC_PROCESSES_RENDEZVOUS_H */
