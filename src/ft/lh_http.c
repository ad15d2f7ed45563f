/* The lighthouse's status page: GET /status (JSON) and GET / (HTML) over
 * HTTP/1.0, one request per connection, from a thread of its own.
 *
 * Its own thread, not the quorum thread's poll: the quorum thread blocks
 * in store calls (it waits for joins to make the fast quorum prompt), and
 * a status page must never be able to delay a quorum. What it shows is a
 * copy the quorum thread refreshes every tick (gang__lh_status).
 *
 * Every socket is non-blocking and every connection has a deadline: a
 * request must arrive whole, at most 4 KiB, within a second, and its reply
 * must be taken within another; otherwise the connection is dropped. At
 * most 32 connections are open; more are closed as they arrive. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/sock.h"
#include "lh_impl.h"
#include "lh_page.h" /* lh_page_js: generated from lh_page.js */

#define REQ_MAX 4096
#define PHASE_MS 1000 /* to send the request; then to take the reply */
#define MAX_CONNS 32

/* ---- Status ---------------------------------------------------------------
 */

void gang__lh_status_init(gang__lh_status *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
}

void gang__lh_status_fini(gang__lh_status *s) {
  for (int i = 0; i < s->nhist; i++)
    free(s->hist[i].ids);
  free(s->reps);
  pthread_mutex_destroy(&s->mu);
  memset(s, 0, sizeof *s);
}

void gang__lh_status_add_event(gang__lh_status *s, int64_t wall_ms,
                               const char *kind, const char *fmt, ...) {
  gang__lh_status_event *e = &s->events[s->nevents++ % GANG__LH_EVENTS];
  e->wall_ms = wall_ms;
  snprintf(e->kind, sizeof e->kind, "%s", kind);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->text, sizeof e->text, fmt, ap);
  va_end(ap);
}

/* A growing text buffer; `fail` sticks once memory runs out. */
typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool fail;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) GANG_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
  for (int pass = 0; pass < 2 && !b->fail; pass++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->fail = true;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)n + 256;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
      b->fail = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

static char *sb_done(sbuf *b, size_t *len) {
  if (b->fail || b->p == NULL) {
    free(b->p);
    return NULL;
  }
  *len = b->len;
  return b->p;
}

/* Text as a JSON string (html false) or as HTML text (html true). */
static void sb_text(sbuf *b, const char *s, bool html) {
  if (!html)
    sb_printf(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (html && (c == '<' || c == '>' || c == '&' || c == '"' || c == '\''))
      sb_printf(b, "&#%d;", c);
    else if (!html && (c == '"' || c == '\\'))
      sb_printf(b, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f)
      sb_printf(b, html ? "?" : "\\u%04x", c);
    else
      sb_printf(b, "%c", c);
  }
  if (!html)
    sb_printf(b, "\"");
}

static void iso_time(int64_t wall_ms, char *buf, size_t cap) {
  time_t t = (time_t)(wall_ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, cap - n, ".%03dZ", (int)(wall_ms % 1000));
}

/* Heartbeat age in ms, or -1 for a replica never heard from. */
static int64_t age_of(const gang__lh_status_rep *r, int64_t now_ms) {
  return r->last_beat_ms == INT64_MIN ? -1 : now_ms - r->last_beat_ms;
}

/* Late: past half the heartbeat timeout, not yet dead. */
static bool late(const gang__lh_status *s, int64_t age) {
  return age >= s->heartbeat_timeout_ms / 2 && age < s->heartbeat_timeout_ms;
}

char *gang__lh_status_json(const gang__lh_status *s, int64_t now_ms,
                           size_t *len) {
  sbuf b = {0};
  sb_printf(&b,
            "{\"incarnation\": \"%016" PRIx64 "\", \"quorum_id\": %" PRId64
            ", \"round\": %" PRId64 ", \"min_replicas\": %d, "
            "\"join_timeout_ms\": %" PRId64 ", \"heartbeat_timeout_ms\": "
            "%" PRId64 ", \"quorum_tick_ms\": %" PRId64 ", \"waiting\": ",
            s->incarnation, s->quorum_id, s->round, s->min_replicas,
            s->join_timeout_ms, s->heartbeat_timeout_ms, s->quorum_tick_ms);
  sb_text(&b, s->waiting, false);
  sb_printf(&b, ",\n \"replicas\": [");
  for (int i = 0; i < s->nreps; i++) {
    const gang__lh_status_rep *r = &s->reps[i];
    int64_t age = age_of(r, now_ms);
    sb_printf(&b, "%s\n  {\"replica_id\": ", i ? "," : "");
    sb_text(&b, r->id, false);
    if (r->has_member)
      sb_printf(&b, ", \"step\": %" PRId64 ", \"world_size\": %d", r->step,
                r->world_size);
    else
      sb_printf(&b, ", \"step\": null, \"world_size\": null");
    if (age >= 0)
      sb_printf(&b, ", \"heartbeat_age_ms\": %" PRId64, age);
    else
      sb_printf(&b, ", \"heartbeat_age_ms\": null");
    sb_printf(&b,
              ", \"healthy\": %s, \"late\": %s, \"joined\": %s, "
              "\"in_quorum\": %s}",
              age >= 0 && age < s->heartbeat_timeout_ms ? "true" : "false",
              late(s, age) ? "true" : "false", r->joined ? "true" : "false",
              r->in_quorum ? "true" : "false");
  }
  sb_printf(&b, "],\n \"quorums\": [");
  for (int i = 0; i < s->nhist; i++) {
    const gang__lh_status_quorum *q = &s->hist[i];
    char when[40];
    iso_time(q->wall_ms, when, sizeof when);
    sb_printf(&b,
              "%s\n  {\"quorum_id\": %" PRId64 ", \"round\": %" PRId64
              ", \"time\": \"%s\", \"time_ms\": %" PRId64 ", \"members\": [",
              i ? "," : "", q->quorum_id, q->round, when, q->wall_ms);
    for (int m = 0; m < q->n; m++) {
      sb_printf(&b, "%s", m ? ", " : "");
      sb_text(&b, q->ids[m], false);
    }
    sb_printf(&b, "]}");
  }
  sb_printf(&b, "],\n \"events\": [");
  int64_t first =
      s->nevents > GANG__LH_EVENTS ? s->nevents - GANG__LH_EVENTS : 0;
  for (int64_t k = s->nevents - 1; k >= first; k--) {
    const gang__lh_status_event *e = &s->events[k % GANG__LH_EVENTS];
    char when[40];
    iso_time(e->wall_ms, when, sizeof when);
    sb_printf(&b,
              "%s\n  {\"seq\": %" PRId64 ", \"time\": \"%s\", \"time_ms\": "
              "%" PRId64 ", \"kind\": ",
              k == s->nevents - 1 ? "" : ",", k, when, e->wall_ms);
    sb_text(&b, e->kind, false);
    sb_printf(&b, ", \"text\": ");
    sb_text(&b, e->text, false);
    sb_printf(&b, "}");
  }
  sb_printf(&b, "],\n \"samples\": [");
  first = s->nsamples > GANG__LH_SAMPLES ? s->nsamples - GANG__LH_SAMPLES : 0;
  for (int64_t k = first; k < s->nsamples; k++) {
    const gang__lh_status_sample *p = &s->samples[k % GANG__LH_SAMPLES];
    sb_printf(&b, "%s[%" PRId64 ", %" PRId64 ", %d]", k == first ? "" : ", ",
              p->wall_ms, p->step, p->members);
  }
  sb_printf(&b, "],\n \"now_ms\": %" PRId64 ", \"allow_kill\": %s}\n",
            gang__lh_wall_ms(), s->allow_kill ? "true" : "false");
  return sb_done(&b, len);
}

char *gang__lh_status_html(const gang__lh_status *s, int64_t now_ms,
                           size_t *len) {
  sbuf b = {0};
  /* The live page: lh_page.js fills these from /status every second. */
  sb_printf(
      &b,
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
      "<title>gang lighthouse</title><style>"
      "body{font-family:sans-serif;margin:1em 2em;color:#222}"
      "td,th{padding:2px 10px;text-align:left}"
      "tr.late td{background:#fff3cd}tr.dead td{background:#f8d7da}"
      "li .t{color:#666;font-family:monospace}"
      ".ev-quorum{color:#0b5394}.ev-lost,.ev-notice,.ev-kill{color:#b00020}"
      ".ev-heal{color:#7a4f00}.ev-back,.ev-new{color:#1e7b34}"
      ".stale{color:#b00020}</style></head><body>\n"
      "<h1>gang lighthouse <span id=\"inc\">%016" PRIx64 "</span></h1>\n"
      "<div id=\"live\" hidden><p id=\"head\"></p><p id=\"waiting\"></p>\n"
      "<h2>Replicas</h2><table id=\"replicas\"></table><p id=\"note\"></p>\n"
      "<h2>Committed step and members</h2><div id=\"chart\"></div>\n"
      "<h2>Events</h2><ul id=\"events\"></ul>\n"
      "<h2>Quorum changes</h2><table id=\"quorums\"></table>\n"
      "<p id=\"updated\"></p></div>\n<noscript>\n",
      s->incarnation);
  /* Without a script: the same, once. */
  sb_printf(&b,
            "<h1>gang lighthouse %016" PRIx64 "</h1>\n<p>quorum %" PRId64
            ", round %" PRId64 ", min_replicas %d, join timeout %" PRId64
            " ms, heartbeat timeout %" PRId64 " ms, tick %" PRId64
            " ms</p>\n<p>",
            s->incarnation, s->quorum_id, s->round, s->min_replicas,
            s->join_timeout_ms, s->heartbeat_timeout_ms, s->quorum_tick_ms);
  sb_text(&b, s->waiting, true);
  sb_printf(&b, "</p>\n<h2>Replicas</h2>\n<table><tr><th>replica</th>"
                "<th>step</th><th>world size</th><th>heartbeat age</th>"
                "<th>joined</th><th>in quorum</th></tr>\n");
  for (int i = 0; i < s->nreps; i++) {
    const gang__lh_status_rep *r = &s->reps[i];
    int64_t age = age_of(r, now_ms);
    sb_printf(&b, "<tr><td>");
    sb_text(&b, r->id, true);
    if (r->has_member)
      sb_printf(&b, "</td><td>%" PRId64 "</td><td>%d", r->step, r->world_size);
    else
      sb_printf(&b, "</td><td>-</td><td>-");
    if (age >= 0)
      sb_printf(&b, "</td><td>%" PRId64 " ms%s", age,
                age >= s->heartbeat_timeout_ms ? " (dead)"
                : late(s, age)                 ? " (late)"
                                               : "");
    else
      sb_printf(&b, "</td><td>never");
    sb_printf(&b, "</td><td>%s</td><td>%s</td></tr>\n",
              r->joined ? "yes" : "no", r->in_quorum ? "yes" : "no");
  }
  sb_printf(&b, "</table>\n<h2>Quorum changes</h2>\n<table><tr><th>id</th>"
                "<th>round</th><th>time (UTC)</th><th>members</th></tr>\n");
  for (int i = 0; i < s->nhist; i++) {
    const gang__lh_status_quorum *q = &s->hist[i];
    char when[40];
    iso_time(q->wall_ms, when, sizeof when);
    sb_printf(&b, "<tr><td>%" PRId64 "</td><td>%" PRId64 "</td><td>%s</td><td>",
              q->quorum_id, q->round, when);
    for (int m = 0; m < q->n; m++) {
      sb_printf(&b, "%s", m ? ", " : "");
      sb_text(&b, q->ids[m], true);
    }
    sb_printf(&b, "</td></tr>\n");
  }
  sb_printf(&b,
            "</table>\n</noscript>\n<script>\n%s</script>\n</body></html>\n",
            lh_page_js);
  return sb_done(&b, len);
}

/* ---- Server ---------------------------------------------------------------
 */

typedef struct hconn {
  int fd; /* -1: free slot */
  int64_t deadline_ms;
  char in[REQ_MAX];
  size_t inlen;
  char *out; /* the reply, once the request is in */
  size_t outlen, outoff;
} hconn;

struct gang__lh_http {
  int lfd, evfd, port;
  pthread_t thread;
  gang__lh_status *status;
  hconn conns[MAX_CONNS];
};

static void conn_close(hconn *c) {
  if (c->fd >= 0)
    close(c->fd);
  free(c->out);
  c->fd = -1;
  c->out = NULL;
  c->inlen = c->outlen = c->outoff = 0;
}

static char *reply(int code, const char *reason, const char *type,
                   const char *body, size_t blen, size_t *len) {
  sbuf b = {0};
  sb_printf(&b,
            "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n%.*s",
            code, reason, type, blen, (int)blen, body);
  return sb_done(&b, len);
}

/* The value of `name` in a query string, %XX and + decoded, into out;
 * false when absent or malformed. */
static bool query_value(const char *query, const char *name, char *out,
                        size_t cap) {
  size_t nl = strlen(name);
  for (const char *p = query; p != NULL && *p; p = strchr(p, '&'), p += !!p) {
    if (strncmp(p, name, nl) != 0 || p[nl] != '=')
      continue;
    size_t o = 0;
    for (const char *v = p + nl + 1; *v && *v != '&'; v++) {
      unsigned x;
      char ch = *v;
      if (ch == '+')
        ch = ' ';
      else if (ch == '%') {
        if (sscanf(v + 1, "%2x", &x) != 1 || !v[1] || !v[2])
          return false;
        ch = (char)x;
        v += 2;
      }
      if (o + 1 >= cap)
        return false;
      out[o++] = ch;
    }
    out[o] = '\0';
    return true;
  }
  return false;
}

/* POST /kill?replica=ID: with allow_kill, the next tick sends replica ID a
 * notice on which its processes kill themselves (a drill). */
static void kill_replica(gang__lh_http *h, hconn *c, const char *query) {
  char id[GANG_LH_ID_MAX], m[GANG_LH_ID_MAX + 160];
  int code = 202;
  const char *reason = "Accepted";
  gang__lh_status *s = h->status;
  pthread_mutex_lock(&s->mu);
  bool known = false;
  bool ok = query != NULL && query_value(query, "replica", id, sizeof id) &&
            gang__lh_id_valid(id, strlen(id));
  for (int i = 0; ok && i < s->nreps && !known; i++)
    known = strcmp(s->reps[i].id, id) == 0;
  if (!s->allow_kill) {
    code = 403, reason = "Forbidden";
    snprintf(m, sizeof m,
             "killing from this page is off: start the "
             "lighthouse with --allow-kill (allow_kill)\n");
  } else if (!ok) {
    code = 400, reason = "Bad Request";
    snprintf(m, sizeof m, "POST /kill?replica=ID: no valid replica id\n");
  } else if (!known) {
    code = 404, reason = "Not Found";
    snprintf(m, sizeof m, "no replica '%s' here\n", id);
  } else if (s->nkills == (int)(sizeof s->kills / sizeof s->kills[0])) {
    code = 503, reason = "Service Unavailable";
    snprintf(m, sizeof m, "too many kills pending: try again\n");
  } else {
    snprintf(s->kills[s->nkills++], GANG_LH_ID_MAX, "%s", id);
    snprintf(m, sizeof m, "replica %s: kill sent with the next tick\n", id);
  }
  pthread_mutex_unlock(&s->mu);
  c->out = reply(code, reason, "text/plain", m, strlen(m), &c->outlen);
}

/* Builds the reply to the request in c->in (complete headers). */
static void respond(gang__lh_http *h, hconn *c) {
  char method[8], path[256];
  c->in[c->inlen < REQ_MAX ? c->inlen : REQ_MAX - 1] = '\0';
  if (sscanf(c->in, "%7s %255s HTTP/%*d.%*d", method, path) != 2) {
    const char *m = "bad request\n";
    c->out = reply(400, "Bad Request", "text/plain", m, strlen(m), &c->outlen);
    return;
  }
  char *q = strchr(path, '?');
  if (q != NULL)
    *q++ = '\0';
  if (strcmp(method, "POST") == 0 && strcmp(path, "/kill") == 0) {
    kill_replica(h, c, q);
    return;
  }
  bool json = strcmp(path, "/status") == 0, html = strcmp(path, "/") == 0;
  if (strcmp(method, "GET") != 0 || (!json && !html)) {
    const char *m = "not found: GET /status (JSON), / (HTML) or POST "
                    "/kill?replica=ID\n";
    c->out = reply(404, "Not Found", "text/plain", m, strlen(m), &c->outlen);
    return;
  }
  size_t blen = 0;
  pthread_mutex_lock(&h->status->mu);
  int64_t now = gang__lh_now_ms();
  char *body = json ? gang__lh_status_json(h->status, now, &blen)
                    : gang__lh_status_html(h->status, now, &blen);
  pthread_mutex_unlock(&h->status->mu);
  if (body != NULL)
    c->out =
        reply(200, "OK", json ? "application/json" : "text/html; charset=utf-8",
              body, blen, &c->outlen);
  free(body);
}

static bool headers_done(const hconn *c) {
  for (size_t i = 0; i + 1 < c->inlen; i++)
    if (c->in[i] == '\n' &&
        (c->in[i + 1] == '\n' ||
         (c->in[i + 1] == '\r' && i + 2 < c->inlen && c->in[i + 2] == '\n')))
      return true;
  return false;
}

/* Moves a connection along; false when it is finished or dropped. */
static bool conn_run(gang__lh_http *h, hconn *c, short revents) {
  if (revents & (POLLERR | POLLNVAL))
    return false;
  if (c->out == NULL) {
    if (!(revents & (POLLIN | POLLHUP)))
      return true;
    ssize_t r = recv(c->fd, c->in + c->inlen, REQ_MAX - 1 - c->inlen, 0);
    if (r < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (r == 0)
      return false;
    c->inlen += (size_t)r;
    if (!headers_done(c))
      return c->inlen < REQ_MAX - 1; /* too long: dropped */
    respond(h, c);
    if (c->out == NULL)
      return false;
    c->deadline_ms = gang__lh_now_ms() + PHASE_MS;
  }
  while (c->outoff < c->outlen) {
    ssize_t w =
        send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
    if (w < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c->outoff += (size_t)w;
  }
  return false;
}

static void accept_some(gang__lh_http *h, int64_t now) {
  for (;;) {
    int fd, err = 0;
    if (gang__sock_accept(h->lfd, &fd, &err) != GANG_OK)
      return;
    hconn *slot = NULL;
    for (int i = 0; i < MAX_CONNS && slot == NULL; i++)
      if (h->conns[i].fd < 0)
        slot = &h->conns[i];
    if (slot == NULL) {
      close(fd);
      continue;
    }
    slot->fd = fd;
    slot->deadline_ms = now + PHASE_MS;
  }
}

static void *http_main(void *arg) {
  gang__lh_http *h = arg;
  pthread_setname_np(pthread_self(), "gang-lh-http");
  struct pollfd pf[2 + MAX_CONNS];
  hconn *who[2 + MAX_CONNS];
  for (;;) {
    int64_t now = gang__lh_now_ms(), next = now + 60000;
    int n = 0;
    pf[n++] = (struct pollfd){h->evfd, POLLIN, 0};
    pf[n++] = (struct pollfd){h->lfd, POLLIN, 0};
    for (int i = 0; i < MAX_CONNS; i++) {
      hconn *c = &h->conns[i];
      if (c->fd < 0)
        continue;
      if (c->deadline_ms <= now) {
        conn_close(c); /* too slow: a slow client must not hold a slot */
        continue;
      }
      if (c->deadline_ms < next)
        next = c->deadline_ms;
      who[n] = c;
      pf[n++] = (struct pollfd){c->fd, c->out ? POLLOUT : POLLIN, 0};
    }
    int rc = poll(pf, (nfds_t)n, (int)(next - now));
    if (rc < 0 && errno != EINTR) {
      GANG_WARN(FT, "lighthouse status page: poll: %s", strerror(errno));
      break;
    }
    if (rc <= 0)
      continue;
    if (pf[0].revents)
      break;
    for (int i = 2; i < n; i++)
      if (pf[i].revents && !conn_run(h, who[i], pf[i].revents))
        conn_close(who[i]);
    if (pf[1].revents)
      accept_some(h, gang__lh_now_ms());
  }
  return NULL;
}

static void http_free(gang__lh_http *h) {
  for (int i = 0; i < MAX_CONNS; i++)
    conn_close(&h->conns[i]);
  if (h->lfd >= 0)
    close(h->lfd);
  if (h->evfd >= 0)
    close(h->evfd);
  free(h);
}

gang_status gang__lh_http_start(const char *host, int port,
                                gang__lh_status *status, gang__lh_http **out) {
  gang__lh_http *h = calloc(1, sizeof *h);
  if (h == NULL)
    return gang__error(GANG_NO_MEMORY, "lighthouse status page: no memory");
  h->status = status;
  h->evfd = -1;
  for (int i = 0; i < MAX_CONNS; i++)
    h->conns[i].fd = -1;
  gang_status st = gang__sock_listen(host, port, 0, &h->lfd, &h->port);
  if (st != GANG_OK) {
    h->lfd = -1;
    http_free(h);
    return gang__error_wrap(st, "lighthouse status page");
  }
  h->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int rc = h->evfd < 0 ? errno : pthread_create(&h->thread, NULL, http_main, h);
  if (rc != 0) {
    http_free(h);
    return gang__error_errno(GANG_SYSTEM, rc,
                             "lighthouse status page: cannot start its thread");
  }
  *out = h;
  return GANG_OK;
}

int gang__lh_http_port(const gang__lh_http *h) { return h ? h->port : -1; }

void gang__lh_http_stop(gang__lh_http *h) {
  if (h == NULL)
    return;
  uint64_t one = 1;
  ssize_t w;
  do
    w = write(h->evfd, &one, sizeof one);
  while (w < 0 && errno == EINTR);
  pthread_join(h->thread, NULL);
  http_free(h);
}
