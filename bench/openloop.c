/*
 * An open-loop HTTP/1.1 load generator: requests on a fixed schedule, latency from each request's due
 * time. bench/run.ts builds it (`gcc -O2`) and runs it with BENCH_OPEN_LOOP=1; bench/README.md says
 * what it is for and bench/BENCHMARKS.md what rate it holds on one core.
 *
 *   openloop --port P --rate R --seconds T --connections C --request FILE [--request FILE2 ...]
 *            [--ready FILE] [--samples FILE] [--drain-seconds D] [--spin-us S] [--host 127.0.0.1]
 *
 * Request n (n = 0 .. R*T-1) is due at t0 + n/R: spread evenly, never a burst per second. It goes out
 * on any idle keep-alive connection as soon as it is due, and its latency runs from its due time to the
 * last byte of its answer, so a server that stalls shows as latency, not as fewer requests (no
 * coordinated omission). One request per connection at a time, no pipelining; C connections, opened
 * before the first request is due.
 *
 * One thread, epoll. When the next request is due within S µs (default 1000) it polls instead of
 * sleeping: a sleeping thread's wake-up on this VM takes 20–50 µs, which would be added to every
 * sample and to its lag. So at the rates used it keeps its core busy; `busyPercent` (the time spent
 * sending and reading, not polling) is how much of the core it needed.
 *
 * What it reports of itself, so that a figure can be refused when the generator was the limit:
 * - `ownLagMs`: how late it sent each request after it could have (after the due time, or after a
 *   connection came free if none was): the generator's own CPU and scheduling, nothing of the server's;
 * - `held`: requests due while all C connections were waiting on the server (C requests outstanding:
 *   the server had stalled for C/R at least, or could not hold the rate). Their latency still runs from
 *   their due time, but the server did not have them when due; above zero at a rate the server holds,
 *   C is too small for its stalls;
 * - `sentInWindowPerSecond`: requests sent within the T seconds, over T.
 *
 * FILE holds the raw request. Its first "{{seq}}", if any, becomes the request's number, twelve digits
 * (a fresh Idempotency-Key per request). With --request given k times (at most 8), request n is the
 * (n mod k)-th file's: a mix in turns on the one schedule (a caller splits the samples by n mod k). With --ready, FILE's request (a readiness probe) is sent on
 * a new connection every millisecond until one answers 200; that moment is t0 and the load's
 * connections are opened only then (a fresh instance's first seconds, connecting included). Without
 * it, every connection is open before t0.
 *
 * Requests still unsent or unanswered at T go on for up to D seconds more (default 10); those still
 * unanswered then are counted, their latency left out and the run marked by its caller.
 * --samples writes each request's latency in microseconds (float64, little-endian, by request
 * number; NaN when it got no answer), so a caller can pool runs and cut them by second.
 *
 * Prints one line: OPENLOOP_RESULT {json}.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IN_CAPACITY (64 * 1024)
#define SEQ_MARKER "{{seq}}"
#define SEQ_DIGITS 12

enum state { CLOSED, CONNECTING, IDLE, BUSY };

typedef struct {
  int fd;
  enum state state;
  /* Connected at least once: counted once towards "every connection open". */
  int opened;
  int64_t seq;
  int64_t due;
  /* When this connection last came free (or connected): a request due before it waited for it. */
  int64_t free_at;
  size_t out_offset;
  size_t out_length;
  /* A request the socket did not take whole, kept until it does. */
  char *out;
  size_t in_length;
  char *in;
} connection;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *message) {
  fprintf(stderr, "openloop: %s (%s)\n", message, strerror(errno));
  exit(2);
}

static char *read_file(const char *path, size_t *length) {
  FILE *file = fopen(path, "rb");
  if (file == NULL) die("cannot open a request file");
  fseek(file, 0, SEEK_END);
  long size = ftell(file);
  fseek(file, 0, SEEK_SET);
  char *buffer = malloc((size_t)size + 1);
  if (fread(buffer, 1, (size_t)size, file) != (size_t)size) die("cannot read a request file");
  fclose(file);
  buffer[size] = 0;
  *length = (size_t)size;
  return buffer;
}

/* ---------------------------------------------------------------------------------------------
 * Responses: "complete" once the head and the whole body (Content-Length or chunked) are in.
 */

typedef enum { INCOMPLETE, COMPLETE, MALFORMED } parse_result;

typedef struct {
  int status;
  int close;
  size_t length;
} response;

static const char *find_header(const char *head, size_t head_length, const char *name) {
  size_t name_length = strlen(name);
  const char *line = memchr(head, '\n', head_length);
  while (line != NULL && (size_t)(line + 1 - head) < head_length) {
    line++;
    if ((size_t)(head + head_length - line) > name_length && strncasecmp(line, name, name_length) == 0 &&
        line[name_length] == ':') {
      const char *value = line + name_length + 1;
      while (*value == ' ' || *value == '\t') value++;
      return value;
    }
    line = memchr(line, '\n', (size_t)(head + head_length - line));
  }
  return NULL;
}

static parse_result parse_chunked(const char *body, size_t available, size_t *consumed) {
  size_t at = 0;
  for (;;) {
    const char *line_end = memmem(body + at, available - at, "\r\n", 2);
    if (line_end == NULL) return INCOMPLETE;
    char *after = NULL;
    unsigned long size = strtoul(body + at, &after, 16);
    if (after == body + at) return MALFORMED;
    at = (size_t)(line_end - body) + 2;
    if (size == 0) {
      /* No trailers are expected: the last chunk, then an empty line. */
      if (available - at < 2) return INCOMPLETE;
      *consumed = at + 2;
      return COMPLETE;
    }
    if (available - at < size + 2) return INCOMPLETE;
    at += size + 2;
  }
}

static parse_result parse_response(const char *data, size_t available, response *out) {
  const char *head_end = memmem(data, available, "\r\n\r\n", 4);
  if (head_end == NULL) return available >= IN_CAPACITY ? MALFORMED : INCOMPLETE;
  size_t head_length = (size_t)(head_end - data) + 2;
  if (available < 12 || memcmp(data, "HTTP/1.", 7) != 0) return MALFORMED;
  out->status = atoi(data + 9);
  const char *connection_header = find_header(data, head_length, "connection");
  out->close = connection_header != NULL && strncasecmp(connection_header, "close", 5) == 0;
  const char *body = head_end + 4;
  size_t body_available = available - (size_t)(body - data);
  const char *content_length = find_header(data, head_length, "content-length");
  if (content_length != NULL) {
    size_t length = strtoull(content_length, NULL, 10);
    if (body_available < length) return available >= IN_CAPACITY ? MALFORMED : INCOMPLETE;
    out->length = (size_t)(body - data) + length;
    return COMPLETE;
  }
  const char *encoding = find_header(data, head_length, "transfer-encoding");
  if (encoding != NULL && strncasecmp(encoding, "chunked", 7) == 0) {
    size_t consumed = 0;
    parse_result result = parse_chunked(body, body_available, &consumed);
    if (result == INCOMPLETE && available >= IN_CAPACITY) return MALFORMED;
    if (result == COMPLETE) out->length = (size_t)(body - data) + consumed;
    return result;
  }
  /* Neither: a bodyless answer (204, 304) or one closed by the server; treat it as the head alone. */
  out->length = (size_t)(body - data);
  return COMPLETE;
}

/* ---------------------------------------------------------------------------------------------
 * Sockets
 */

static struct sockaddr_in address;

static int open_socket(int nonblocking) {
  int fd = socket(AF_INET, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0) | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/*
 * Sends `request` on a new connection until the answer is 200; one try every millisecond. Returns
 * the moment of the 200, or -1 after `timeout_ns`.
 */
static int64_t wait_ready(const char *request, size_t length, int64_t timeout_ns) {
  int64_t started = now_ns();
  char buffer[16384];
  while (now_ns() - started < timeout_ns) {
    int fd = open_socket(0);
    struct timeval receive_timeout = { .tv_sec = 1, .tv_usec = 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &receive_timeout, sizeof receive_timeout);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) == 0 && write(fd, request, length) == (ssize_t)length) {
      size_t have = 0;
      response answer;
      for (;;) {
        ssize_t got = read(fd, buffer + have, sizeof buffer - have);
        if (got <= 0) break;
        have += (size_t)got;
        parse_result result = parse_response(buffer, have, &answer);
        if (result == MALFORMED) break;
        if (result == COMPLETE) {
          if (answer.status == 200) {
            int64_t ready = now_ns();
            close(fd);
            return ready;
          }
          break;
        }
      }
    }
    close(fd);
    struct timespec pause = { .tv_sec = 0, .tv_nsec = 1000000 };
    nanosleep(&pause, NULL);
  }
  return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Statistics
 */

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest rank on a sorted array. */
static double percentile(const double *sorted, int64_t count, double p) {
  if (count == 0) return 0;
  int64_t rank = (int64_t)ceil(p * (double)count);
  if (rank < 1) rank = 1;
  return sorted[rank - 1];
}

static void print_summary(const char *name, double *values, int64_t count) {
  qsort(values, (size_t)count, sizeof *values, compare_doubles);
  double sum = 0;
  for (int64_t i = 0; i < count; i++) sum += values[i];
  printf("\"%s\":{\"count\":%lld,\"mean\":%.4f,\"p50\":%.4f,\"p90\":%.4f,\"p99\":%.4f,\"p999\":%.4f,\"max\":%.4f}", name,
         (long long)count, count == 0 ? 0 : sum / (double)count, percentile(values, count, 0.5),
         percentile(values, count, 0.9), percentile(values, count, 0.99), percentile(values, count, 0.999),
         count == 0 ? 0 : values[count - 1]);
}

/* ---------------------------------------------------------------------------------------------
 * Connections
 */

static connection *connections;
static int connection_count;
static int epoll_fd;
/*
 * Idle connections, first freed first out: the head is the connection that has been free longest, so
 * a request found the head busy at its due time only if every connection was.
 */
static int *idle;
static int idle_head;
static int idle_count;

static void push_idle(int index) {
  idle[(idle_head + idle_count++) % connection_count] = index;
}

static int pop_idle(void) {
  int index = idle[idle_head];
  idle_head = (idle_head + 1) % connection_count;
  idle_count--;
  return index;
}

static void remove_idle(int index) {
  for (int i = 0; i < idle_count; i++) {
    if (idle[(idle_head + i) % connection_count] != index) continue;
    for (int j = i; j + 1 < idle_count; j++) {
      idle[(idle_head + j) % connection_count] = idle[(idle_head + j + 1) % connection_count];
    }
    idle_count--;
    return;
  }
}

static struct {
  int64_t connect, read, write, closed, malformed;
} errors;

static void watch(int index, uint32_t events, int op) {
  struct epoll_event event = { .events = events, .data = { .u32 = (uint32_t)index } };
  if (epoll_ctl(epoll_fd, op, connections[index].fd, &event) != 0) die("epoll_ctl");
}

static void start_connect(int index, int64_t now) {
  connection *c = &connections[index];
  if (c->in == NULL) c->in = malloc(IN_CAPACITY);
  c->fd = open_socket(1);
  c->in_length = 0;
  c->out_length = 0;
  c->out_offset = 0;
  c->free_at = now;
  if (connect(c->fd, (struct sockaddr *)&address, sizeof address) != 0 && errno != EINPROGRESS) {
    errors.connect++;
    close(c->fd);
    c->state = CLOSED;
    return;
  }
  c->state = CONNECTING;
  watch(index, EPOLLOUT, EPOLL_CTL_ADD);
}

static void make_idle(int index, int64_t now) {
  connections[index].state = IDLE;
  connections[index].free_at = now;
  push_idle(index);
}

/* Drops the connection (its request, if any, is lost and counted by the caller) and dials again. */
static void reconnect(int index, int64_t now) {
  connection *c = &connections[index];
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  if (c->state == IDLE) remove_idle(index);
  start_connect(index, now);
}

/* ---------------------------------------------------------------------------------------------
 * The run
 */

static double *latency_us;  /* by request number; NaN until answered */
static double *own_lag_ms;  /* by send order */
static double *send_lag_ms; /* by send order */
static int64_t sent, answered, held, non_2xx, statuses[600];
static double held_max_ms;

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *request_files[8], *ready_file = NULL, *samples_file = NULL;
  int request_file_count = 0;
  int port = 0;
  double rate = 0, seconds = 0, drain_seconds = 10;
  int64_t spin_ns = 1000000;
  connection_count = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--host") == 0) host = argv[i + 1];
    else if (strcmp(argv[i], "--port") == 0) port = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--rate") == 0) rate = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--seconds") == 0) seconds = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--connections") == 0) connection_count = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--request") == 0 && request_file_count < 8) request_files[request_file_count++] = argv[i + 1];
    else if (strcmp(argv[i], "--ready") == 0) ready_file = argv[i + 1];
    else if (strcmp(argv[i], "--samples") == 0) samples_file = argv[i + 1];
    else if (strcmp(argv[i], "--drain-seconds") == 0) drain_seconds = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--spin-us") == 0) spin_ns = (int64_t)(atof(argv[i + 1]) * 1000);
    else {
      fprintf(stderr, "openloop: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (port <= 0 || rate <= 0 || seconds <= 0 || connection_count <= 0 || request_file_count == 0) {
    fprintf(stderr, "usage: openloop --port P --rate R --seconds T --connections C --request FILE "
                    "[--request FILE ...] [--ready FILE] [--samples FILE] [--drain-seconds D] [--spin-us S] [--host H]\n");
    return 2;
  }
  /* The kernel's default 50 µs of timer slack would make every wake-up late by up to that much. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  address.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, host, &address.sin_addr) != 1) die("bad --host");

  /* Every request is one of these but for its number, written in place. */
  char *outs[8];
  int has_marker[8];
  size_t prefix_lengths[8], request_lengths[8], longest_request = 0;
  for (int r = 0; r < request_file_count; r++) {
    size_t template_length;
    char *template = read_file(request_files[r], &template_length);
    char *marker = strstr(template, SEQ_MARKER);
    size_t prefix_length = marker == NULL ? template_length : (size_t)(marker - template);
    size_t suffix_offset = marker == NULL ? template_length : prefix_length + strlen(SEQ_MARKER);
    size_t request_length = marker == NULL ? template_length : template_length - strlen(SEQ_MARKER) + SEQ_DIGITS;
    char *out = malloc(request_length + 1);
    memcpy(out, template, prefix_length);
    if (marker != NULL) memcpy(out + prefix_length + SEQ_DIGITS, template + suffix_offset, template_length - suffix_offset);
    outs[r] = out;
    has_marker[r] = marker != NULL;
    prefix_lengths[r] = prefix_length;
    request_lengths[r] = request_length;
    if (request_length > longest_request) longest_request = request_length;
  }

  int64_t planned = (int64_t)llround(rate * seconds);
  latency_us = malloc(sizeof(double) * (size_t)(planned > 0 ? planned : 1));
  own_lag_ms = malloc(sizeof(double) * (size_t)(planned > 0 ? planned : 1));
  send_lag_ms = malloc(sizeof(double) * (size_t)(planned > 0 ? planned : 1));
  for (int64_t i = 0; i < planned; i++) latency_us[i] = NAN;
  connections = calloc((size_t)connection_count, sizeof(connection));
  idle = malloc(sizeof(int) * (size_t)connection_count);
  epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) die("epoll_create1");

  int64_t ready_wait_ns = 0, t0 = 0, window_end = 0, deadline = 0;
  int64_t setup_started = now_ns();
  if (ready_file != NULL) {
    size_t ready_length;
    char *ready_request = read_file(ready_file, &ready_length);
    t0 = wait_ready(ready_request, ready_length, (int64_t)60 * 1000000000LL);
    if (t0 < 0) {
      fprintf(stderr, "openloop: no 200 from the readiness probe within 60 s\n");
      return 3;
    }
    ready_wait_ns = t0 - setup_started;
    window_end = t0 + (int64_t)(seconds * 1e9);
    deadline = window_end + (int64_t)(drain_seconds * 1e9);
    for (int i = 0; i < connection_count; i++) start_connect(i, t0);
  } else {
    for (int i = 0; i < connection_count; i++) start_connect(i, setup_started);
  }

  struct rusage usage_before;
  getrusage(RUSAGE_SELF, &usage_before);
  /* Due time of request n: t0 + n / rate, computed from n each time (no drift). */
#define DUE(n) (t0 + (int64_t)((double)(n) * 1e9 / rate))
  int64_t sent_in_window = 0, answered_in_window = 0;
  /* Time spent sending and reading, not waiting: what share of its core the generator needed. */
  int64_t busy_ns = 0;
  /* Requests 0 .. due_count-1 are due by now. */
  int64_t next = 0, due_count = 0, connected = 0, all_connected_at = -1;
  int in_flight = 0;
  struct epoll_event events[512];

  for (;;) {
    int64_t now = now_ns();
    int64_t sent_before = sent;
    if (t0 != 0) {
      while (due_count < planned && DUE(due_count) <= now) due_count++;
      /* Send everything due, on idle connections, oldest first. */
      while (next < due_count && idle_count > 0) {
        int64_t due = DUE(next);
        int index = pop_idle();
        connection *c = &connections[index];
        int r = (int)(next % request_file_count);
        char *out = outs[r];
        size_t request_length = request_lengths[r], prefix_length = prefix_lengths[r];
        if (has_marker[r]) {
          int64_t digits = next;
          for (int d = SEQ_DIGITS - 1; d >= 0; d--, digits /= 10) out[prefix_length + d] = (char)('0' + digits % 10);
        }
        c->seq = next;
        c->due = due;
        c->out_offset = 0;
        c->out_length = request_length;
        c->state = BUSY;
        in_flight++;
        ssize_t wrote = write(c->fd, out, request_length);
        int64_t at = now_ns();
        /*
         * A request due while every connection was waiting on the server (C requests outstanding:
         * the server stalled for C/R at least) waited for the one it went out on: counted, and its
         * latency still runs from its due time.
         */
        int64_t could_send = c->free_at > due ? c->free_at : due;
        if (c->free_at > due && all_connected_at >= 0 && due >= all_connected_at) {
          held++;
          double waited = (double)(c->free_at - due) / 1e6;
          if (waited > held_max_ms) held_max_ms = waited;
        }
        own_lag_ms[sent] = (double)(at - could_send) / 1e6;
        send_lag_ms[sent] = (double)(at - due) / 1e6;
        sent++;
        if (due < window_end) sent_in_window += at < window_end;
        next++;
        if (wrote == (ssize_t)request_length) continue;
        if (wrote < 0 && errno != EAGAIN) {
          errors.write++;
          in_flight--;
          reconnect(index, at);
          continue;
        }
        /* The rest goes out when the socket takes it: this connection's own copy. */
        if (c->out == NULL) c->out = malloc(longest_request);
        memcpy(c->out, out, request_length);
        c->out_offset = wrote < 0 ? 0 : (size_t)wrote;
        watch(index, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
      }
      if (sent != sent_before) busy_ns += now_ns() - now;
      if (next >= planned && in_flight == 0) break;
      if (now >= deadline) break;
    }

    /* Until the next request is due (spinning when that is soon) or an event, when a connection is idle for it. */
    int64_t wait_ns = 100000000;
    if (t0 != 0 && next < planned && idle_count > 0) {
      int64_t until = DUE(next) - now;
      wait_ns = until < 0 ? 0 : until;
    }
    if (t0 != 0 && deadline - now < wait_ns) wait_ns = deadline - now > 0 ? deadline - now : 0;
    if (wait_ns < spin_ns) wait_ns = 0;
    struct timespec timeout = { .tv_sec = wait_ns / 1000000000LL, .tv_nsec = wait_ns % 1000000000LL };
    int ready = epoll_pwait2(epoll_fd, events, 512, &timeout, NULL);
    if (ready < 0 && errno != EINTR) die("epoll_pwait2");
    int64_t woke = ready > 0 ? now_ns() : 0;
    for (int e = 0; e < ready; e++) {
      int index = (int)events[e].data.u32;
      connection *c = &connections[index];
      int64_t at = now_ns();
      if (c->state == CONNECTING) {
        int error = 0;
        socklen_t length = sizeof error;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &length);
        if (error != 0) {
          errors.connect++;
          reconnect(index, at);
          continue;
        }
        watch(index, EPOLLIN, EPOLL_CTL_MOD);
        make_idle(index, at);
        if (!c->opened) {
          c->opened = 1;
          if (++connected == connection_count) {
            all_connected_at = at;
            if (t0 == 0) {
              t0 = at;
              window_end = t0 + (int64_t)(seconds * 1e9);
              deadline = window_end + (int64_t)(drain_seconds * 1e9);
            }
          }
        }
        continue;
      }
      if ((events[e].events & EPOLLOUT) && c->state == BUSY && c->out_offset < c->out_length) {
        ssize_t wrote = write(c->fd, c->out + c->out_offset, c->out_length - c->out_offset);
        if (wrote < 0 && errno != EAGAIN) {
          errors.write++;
          in_flight--;
          reconnect(index, at);
          continue;
        }
        if (wrote > 0) c->out_offset += (size_t)wrote;
        if (c->out_offset == c->out_length) watch(index, EPOLLIN, EPOLL_CTL_MOD);
      }
      if (!(events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      ssize_t got = read(c->fd, c->in + c->in_length, IN_CAPACITY - c->in_length);
      if (got <= 0) {
        if (got < 0 && errno == EAGAIN) continue;
        if (c->state == BUSY) {
          errors.read++;
          in_flight--;
        } else {
          errors.closed++;
        }
        reconnect(index, at);
        continue;
      }
      c->in_length += (size_t)got;
      if (c->state != BUSY) {
        errors.malformed++;
        reconnect(index, at);
        continue;
      }
      response answer;
      parse_result result = parse_response(c->in, c->in_length, &answer);
      if (result == INCOMPLETE) continue;
      in_flight--;
      if (result == MALFORMED || answer.length != c->in_length) {
        errors.malformed++;
        reconnect(index, at);
        continue;
      }
      latency_us[c->seq] = (double)(at - c->due) / 1e3;
      answered++;
      answered_in_window += at < window_end;
      if (answer.status > 0 && answer.status < 600) statuses[answer.status]++;
      if (answer.status < 200 || answer.status > 299) non_2xx++;
      c->in_length = 0;
      if (answer.close) reconnect(index, at);
      else make_idle(index, at);
    }
    if (ready > 0) busy_ns += now_ns() - woke;
    if (t0 == 0 && now_ns() - setup_started > 10 * 1000000000LL) {
      fprintf(stderr, "openloop: only %lld of %d connections open after 10 s\n", (long long)connected, connection_count);
      return 3;
    }
  }
  int64_t finished = now_ns();
  struct rusage usage_after;
  getrusage(RUSAGE_SELF, &usage_after);
  double cpu_seconds = (double)(usage_after.ru_utime.tv_sec - usage_before.ru_utime.tv_sec) +
                       (double)(usage_after.ru_utime.tv_usec - usage_before.ru_utime.tv_usec) / 1e6 +
                       (double)(usage_after.ru_stime.tv_sec - usage_before.ru_stime.tv_sec) +
                       (double)(usage_after.ru_stime.tv_usec - usage_before.ru_stime.tv_usec) / 1e6;
  double elapsed = (double)(finished - t0) / 1e9;

  if (samples_file != NULL) {
    FILE *file = fopen(samples_file, "wb");
    if (file == NULL || fwrite(latency_us, sizeof(double), (size_t)planned, file) != (size_t)planned) die("cannot write --samples");
    fclose(file);
  }
  double *latency_ms = malloc(sizeof(double) * (size_t)(planned > 0 ? planned : 1));
  int64_t latency_count = 0;
  for (int64_t i = 0; i < planned; i++) {
    if (!isnan(latency_us[i])) latency_ms[latency_count++] = latency_us[i] / 1e3;
  }

  printf("OPENLOOP_RESULT {\"rate\":%.3f,\"seconds\":%.3f,\"connections\":%d,"
         "\"planned\":%lld,\"sent\":%lld,\"answered\":%lld,\"unsent\":%lld,\"unanswered\":%lld,\"non2xx\":%lld,",
         rate, seconds, connection_count, (long long)planned, (long long)sent,
         (long long)answered, (long long)(planned - sent),
         (long long)(sent - answered - errors.read - errors.write - errors.malformed), (long long)non_2xx);
  printf("\"statuses\":{");
  int first = 1;
  for (int s = 0; s < 600; s++) {
    if (statuses[s] == 0) continue;
    printf("%s\"%d\":%lld", first ? "" : ",", s, (long long)statuses[s]);
    first = 0;
  }
  printf("},\"errors\":{\"connect\":%lld,\"read\":%lld,\"write\":%lld,\"closed\":%lld,\"malformed\":%lld},",
         (long long)errors.connect, (long long)errors.read, (long long)errors.write, (long long)errors.closed,
         (long long)errors.malformed);
  printf("\"sentInWindowPerSecond\":%.1f,\"answeredInWindowPerSecond\":%.1f,\"held\":%lld,\"heldMaxMs\":%.4f,",
         (double)sent_in_window / seconds, (double)answered_in_window / seconds, (long long)held, held_max_ms);
  printf("\"readyWaitMs\":%.3f,\"allConnectedMs\":%.3f,\"elapsedSeconds\":%.3f,\"cpuSeconds\":%.3f,\"cpuPercent\":%.1f,"
         "\"busyPercent\":%.1f,",
         (double)ready_wait_ns / 1e6, all_connected_at < 0 ? -1.0 : (double)(all_connected_at - t0) / 1e6, elapsed,
         cpu_seconds, elapsed > 0 ? cpu_seconds / elapsed * 100 : 0,
         elapsed > 0 ? (double)busy_ns / 1e9 / elapsed * 100 : 0);
  print_summary("latencyMs", latency_ms, latency_count);
  printf(",");
  print_summary("ownLagMs", own_lag_ms, sent);
  printf(",");
  print_summary("sendLagMs", send_lag_ms, sent);
  printf("}\n");
  return 0;
}
