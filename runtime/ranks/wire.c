/*
 * wire.c: messages between the lecture (the parent) and its pool ranks.
 *
 * A stream socket and a tiny framing: a 16-byte header {type, size} and
 * `size` bytes. The parent listens; every rank connects once, when the pool
 * starts, and keeps its connection for the pool's life. A rank waiting for
 * its next spawn sits in a blocking read on it: an idle rank uses no CPU at
 * all, however many there are.
 *
 * On one machine the socket is a Unix socket in the abstract namespace
 * (no file to clean up, gone with the last process holding it), which can
 * also carry file descriptors: the parent gives each rank its stdout and
 * stderr. Across machines it is TCP. Nothing here knows about MPI.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ranks/ranks.h"

typedef struct wire_header {
    uint32_t type;
    uint32_t reserved;
    uint64_t size;
} wire_header;

/* Bodies beyond this are a corrupt stream, not a message. Steps are small;
 * the largest message is a spawn with LECTERN_MAX_SPAWN_ARGS bytes of args. */
#define MAX_BODY ((uint64_t)LECTERN_MAX_SPAWN_ARGS + (1u << 20))

static int write_all(int fd, const void *p, size_t n) {
    const char *s = p;
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n) {
    char *s = p;
    while (n > 0) {
        ssize_t r = recv(fd, s, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        s += r;
        n -= (size_t)r;
    }
    return 0;
}

int lx_wire_send(int fd, uint32_t type, const void *a, size_t na, const void *b, size_t nb) {
    wire_header h = {.type = type, .reserved = 0, .size = (uint64_t)(na + nb)};
    if (write_all(fd, &h, sizeof h) != 0) return -1;
    if (na && write_all(fd, a, na) != 0) return -1;
    if (nb && write_all(fd, b, nb) != 0) return -1;
    return 0;
}

int lx_wire_recv(int fd, uint32_t *type, char **body, size_t *size) {
    wire_header h;
    *body = NULL;
    *size = 0;
    if (read_all(fd, &h, sizeof h) != 0) return -1;
    if (h.size > MAX_BODY) {
        errno = EPROTO;
        return -1;
    }
    char *b = malloc((size_t)h.size + 1);
    if (!b) return -1;
    if (h.size && read_all(fd, b, (size_t)h.size) != 0) {
        free(b);
        return -1;
    }
    b[h.size] = '\0';
    *type = h.type;
    *body = b;
    *size = (size_t)h.size;
    return 0;
}

/* ---- file descriptors over a Unix socket ---- */

enum { MAX_FDS = 4 };

int lx_wire_send_fds(int fd, const int *fds, int n) {
    if (n <= 0 || n > MAX_FDS) return -1;
    char byte = 'F'; /* SCM_RIGHTS needs at least one byte of data to ride on */
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.buf,
                         .msg_controllen = CMSG_SPACE((size_t)n * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
    for (;;) {
        ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        return w == 1 ? 0 : -1;
    }
}

int lx_wire_recv_fds(int fd, int *fds, int n) {
    if (n <= 0 || n > MAX_FDS) return -1;
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
    ssize_t r;
    do
        r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    if (r != 1) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
        c->cmsg_len != CMSG_LEN((size_t)n * sizeof(int)))
        return -1;
    memcpy(fds, CMSG_DATA(c), (size_t)n * sizeof(int));
    return 0;
}

/* ---- listening and connecting ---- */

/* An abstract Unix address: sun_path starts with a NUL byte. */
static socklen_t abstract_address(struct sockaddr_un *sa, const char *name) {
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t len = strlen(name);
    if (len > sizeof sa->sun_path - 2) len = sizeof sa->sun_path - 2;
    memcpy(sa->sun_path + 1, name, len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

static int listen_unix(const char *tag, char *address, size_t size) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    struct sockaddr_un sa;
    socklen_t len = abstract_address(&sa, tag);
    if (bind(s, (struct sockaddr *)&sa, len) != 0 || listen(s, LECTERN_MAX_WORLD) != 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    snprintf(address, size, "unix:%s", tag);
    return s;
}

/* TCP on every interface, IPv6 and IPv4 at once where the system allows. */
static int listen_tcp(char *address, size_t size) {
    int s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0) {
        int off = 0;
        setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        struct sockaddr_in6 sa6;
        memset(&sa6, 0, sizeof sa6);
        sa6.sin6_family = AF_INET6;
        sa6.sin6_addr = in6addr_any;
        if (bind(s, (struct sockaddr *)&sa6, sizeof sa6) != 0) {
            close(s);
            s = -1;
        }
    }
    if (s < 0) {
        s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) return -1;
        struct sockaddr_in sa4;
        memset(&sa4, 0, sizeof sa4);
        sa4.sin_family = AF_INET;
        sa4.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(s, (struct sockaddr *)&sa4, sizeof sa4) != 0) {
            int e = errno;
            close(s);
            errno = e;
            return -1;
        }
    }
    struct sockaddr_storage got;
    socklen_t len = sizeof got;
    if (listen(s, LECTERN_MAX_WORLD) != 0 || getsockname(s, (struct sockaddr *)&got, &len) != 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    int port = got.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&got)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&got)->sin_port);
    /* Ranks elsewhere reach us by our host name, unless told another way. */
    const char *host = getenv("LECTERN_LECTURE_HOST");
    char name[256] = "localhost";
    if (host && *host) snprintf(name, sizeof name, "%s", host);
    else gethostname(name, sizeof name - 1);
    snprintf(address, size, "tcp:%s:%d", name, port);
    return s;
}

int lx_wire_listen(int tcp, const char *tag, char *address, size_t size) {
    return tcp ? listen_tcp(address, size) : listen_unix(tag, address, size);
}

static int connect_tcp(const char *hostport) {
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host) {
        errno = EINVAL;
        return -1;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    struct addrinfo hints, *list = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, colon + 1, &hints, &list);
    if (rc != 0) {
        errno = EHOSTUNREACH;
        return -1;
    }
    int s = -1;
    for (struct addrinfo *a = list; a; a = a->ai_next) {
        s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) continue;
        if (connect(s, a->ai_addr, a->ai_addrlen) == 0) break;
        close(s);
        s = -1;
    }
    freeaddrinfo(list);
    if (s >= 0) {
        int one = 1; /* steps are small messages: send each at once */
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return s;
}

int lx_wire_connect(const char *address) {
    if (strncmp(address, "tcp:", 4) == 0) return connect_tcp(address + 4);
    if (strncmp(address, "unix:", 5) != 0) {
        errno = EINVAL;
        return -1;
    }
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    struct sockaddr_un sa;
    socklen_t len = abstract_address(&sa, address + 5);
    if (connect(s, (struct sockaddr *)&sa, len) != 0) {
        int e = errno;
        close(s);
        errno = e;
        return -1;
    }
    return s;
}
