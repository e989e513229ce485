/*
 * cvc5-driver: a small stand-in for the `cvc5` executable, built on the C API
 * of the cvc5 1.3.1 shared libraries that the PyPI wheel ships (the wheel has
 * no executable and no headers).
 *
 * It reads SMT-LIB 2.6 from stdin, hands the parser one complete top-level
 * s-expression at a time, invokes each command and prints the command's output
 * followed by a flush, so that a caller that keeps stdin open (no EOF) gets
 * each answer as soon as it is computed. That is how cedar-policy-symcc drives
 * cvc5: `$CVC5 --lang smt --tlimit=N`, one long-lived process, `(reset)`
 * between queries, one `sat`/`unsat`/`unknown` line per `(check-sat)`.
 *
 * Differences from the real cvc5 driver, all deliberate (see README.md):
 *   - `--tlimit=N` is taken as a per-query limit (`tlimit-per`), not a limit
 *     on the life of the process.
 *   - `(reset)` is carried out here: a fresh term manager, solver, symbol
 *     manager and parser, with the command-line options applied again.
 *   - A `check-sat` that runs out of time answers a bare `unknown` line.
 *   - A parse error prints `(error "Parse Error: ...")` on one line and the
 *     driver keeps reading.
 *
 * The prototypes below are declared here, matching include/cvc5/c/cvc5.h and
 * include/cvc5/c/cvc5_parser.h of cvc5 1.3.1, because the wheel has no headers.
 * Any error the C API itself raises (e.g. a bad option value) makes the library
 * print "cvc5: error: ..." on stderr and exit with status 1.
 */

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- cvc5 1.3.1 C API (subset) ------------------------------------------ */

typedef struct Cvc5TermManager Cvc5TermManager;
typedef struct Cvc5 Cvc5;
typedef struct Cvc5SymbolManager Cvc5SymbolManager;
typedef struct Cvc5InputParser Cvc5InputParser;
typedef struct cvc5_cmd_t *Cvc5Command;

/* enum Cvc5InputLanguage in cvc5_types.h: SMT_LIB_2_6 = 0, SYGUS_2_1, UNKNOWN */
typedef enum {
  CVC5_INPUT_LANGUAGE_SMT_LIB_2_6 = 0,
  CVC5_INPUT_LANGUAGE_SYGUS_2_1,
  CVC5_INPUT_LANGUAGE_UNKNOWN,
} Cvc5InputLanguage;

/* cvc5.h */
Cvc5TermManager *cvc5_term_manager_new(void);
void cvc5_term_manager_delete(Cvc5TermManager *tm);
Cvc5 *cvc5_new(Cvc5TermManager *tm);
void cvc5_delete(Cvc5 *cvc5);
void cvc5_set_option(Cvc5 *cvc5, const char *option, const char *value);
const char *cvc5_get_option(Cvc5 *cvc5, const char *option);
const char **cvc5_get_option_names(Cvc5 *cvc5, size_t *size);
const char *cvc5_get_version(Cvc5 *cvc5);

/* cvc5_parser.h */
Cvc5SymbolManager *cvc5_symbol_manager_new(Cvc5TermManager *tm);
void cvc5_symbol_manager_delete(Cvc5SymbolManager *sm);
const char *cvc5_cmd_invoke(Cvc5Command cmd, Cvc5 *cvc5, Cvc5SymbolManager *sm);
const char *cvc5_cmd_get_name(const Cvc5Command cmd);
Cvc5InputParser *cvc5_parser_new(Cvc5 *cvc5, Cvc5SymbolManager *sm);
void cvc5_parser_delete(Cvc5InputParser *parser);
void cvc5_parser_release(Cvc5InputParser *parser);
void cvc5_parser_set_inc_str_input(Cvc5InputParser *parser,
                                   Cvc5InputLanguage lang, const char *name);
void cvc5_parser_append_inc_str_input(Cvc5InputParser *parser,
                                      const char *input);
Cvc5Command cvc5_parser_next_command(Cvc5InputParser *parser,
                                     const char **error_msg);
bool cvc5_parser_done(Cvc5InputParser *parser);

/* ---- small helpers ------------------------------------------------------ */

static const char *prog = "cvc5-driver";
static const char *input_name = "<stdin>";

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "%s: ", prog);
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(1);
}

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (!q) {
    fputs("cvc5-driver: out of memory\n", stderr);
    exit(1);
  }
  return q;
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xrealloc(NULL, n), s, n);
}

/* A growable byte buffer. */
typedef struct {
  char *data;
  size_t len, cap;
} Buf;

static void buf_push(Buf *b, char c) {
  if (b->len + 2 > b->cap) {
    b->cap = b->cap ? b->cap * 2 : 4096;
    b->data = xrealloc(b->data, b->cap);
  }
  b->data[b->len++] = c;
  b->data[b->len] = '\0';
}

static void out_write(const char *s, size_t n) {
  if (n && fwrite(s, 1, n, stdout) != n) exit(1);
}

static void out_flush(void) {
  if (fflush(stdout) != 0) exit(1);
}

/* ---- options -------------------------------------------------------------- */

/* Options applied to every solver this driver creates (also after (reset)). */
typedef struct {
  char *name, *value;
} Opt;
static Opt *opts;
static size_t n_opts;

static void opt_set(const char *name, const char *value) {
  for (size_t i = 0; i < n_opts; i++) {
    if (strcmp(opts[i].name, name) == 0) {
      free(opts[i].value);
      opts[i].value = xstrdup(value);
      return;
    }
  }
  opts = xrealloc(opts, (n_opts + 1) * sizeof *opts);
  opts[n_opts].name = xstrdup(name);
  opts[n_opts].value = xstrdup(value);
  n_opts++;
}

static const char *opt_get(const char *name) {
  for (size_t i = 0; i < n_opts; i++)
    if (strcmp(opts[i].name, name) == 0) return opts[i].value;
  return NULL;
}

/* Options that, written as `--name VALUE`, take the next argument. */
static const char *const value_opts[] = {
    "lang", "input-language", "output-lang", "output-language", "tlimit",
    "tlimit-per", "rlimit", "rlimit-per", "seed", "sat-random-seed",
    "force-logic", "verbosity", NULL};

static bool takes_value(const char *name) {
  for (size_t i = 0; value_opts[i]; i++)
    if (strcmp(value_opts[i], name) == 0) return true;
  return false;
}

static bool known_option(Cvc5 *slv, const char *name) {
  size_t n = 0;
  const char **names = cvc5_get_option_names(slv, &n);
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return true;
  return false;
}

static void check_lang(const char *v) {
  static const char *const ok[] = {"smt",        "smt2",   "smt2.6",
                                   "smtlib2.6",  "smt_lib_2_6", "smtlib",
                                   "auto",       NULL};
  for (size_t i = 0; ok[i]; i++)
    if (strcmp(ok[i], v) == 0) return;
  die("unsupported input language '%s' (only SMT-LIB 2.6: --lang smt)", v);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: cvc5 [options] < input.smt2\n"
          "A cvc5 1.3.1 front end reading SMT-LIB 2.6 from stdin only.\n"
          "  --lang smt | --lang=smt      input language (SMT-LIB 2.6 only)\n"
          "  --tlimit=MS                  time limit per check-sat (taken as\n"
          "                               --tlimit-per; see README.md)\n"
          "  --tlimit-per=MS              time limit per check-sat\n"
          "  --NAME=VALUE                 any cvc5 option, via set-option\n"
          "  --NAME / --no-NAME           boolean cvc5 option true / false\n"
          "  -i                           --incremental\n"
          "  -q                           --quiet\n"
          "  --version, --help\n");
}

/*
 * Parse the command line into `opts`. Option names are checked against the
 * names the library knows; values are checked when the options are first
 * applied, before any input is read.
 */
static void parse_args(int argc, char **argv, Cvc5 *probe) {
  bool tlimit_per_given = false;
  const char *tlimit = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    }
    if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
      printf("This is cvc5 version %s (cvc5-driver, C API front end)\n",
             cvc5_get_version(probe));
      exit(0);
    }
    if (strcmp(a, "-i") == 0) {
      opt_set("incremental", "true");
      continue;
    }
    if (strcmp(a, "-q") == 0) {
      opt_set("quiet", "true");
      continue;
    }
    if (strcmp(a, "-L") == 0) {
      if (i + 1 >= argc) die("option %s needs a value", a);
      check_lang(argv[++i]);
      continue;
    }
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
      if (a[0] != '-')
        die("input files are not supported ('%s'); feed SMT-LIB on stdin", a);
      die("unknown option '%s' (try --help)", a);
    }
    char *name = xstrdup(a + 2);
    char *value = NULL;
    char *eq = strchr(name, '=');
    if (eq) {
      *eq = '\0';
      value = eq + 1;
    } else if (takes_value(name)) {
      if (i + 1 >= argc) die("option --%s needs a value", name);
      value = argv[++i];
    }
    if (strcmp(name, "lang") == 0 || strcmp(name, "input-language") == 0) {
      check_lang(value);
    } else if (strcmp(name, "tlimit") == 0) {
      /* Process-wide wall-clock limit in the real driver; per query here. */
      tlimit = xstrdup(value);
    } else if (strcmp(name, "tlimit-per") == 0) {
      opt_set("tlimit-per", value);
      tlimit_per_given = true;
    } else if (strcmp(name, "interactive") == 0 ||
               strcmp(name, "no-interactive") == 0) {
      /* Accepted and ignored: this driver always answers command by command. */
    } else if (value) {
      if (!known_option(probe, name)) die("unknown option '--%s'", name);
      opt_set(name, value);
    } else if (known_option(probe, name)) {
      opt_set(name, "true");
    } else if (strncmp(name, "no-", 3) == 0 && known_option(probe, name + 3)) {
      opt_set(name + 3, "false");
    } else {
      die("unknown option '--%s' (try --help)", name);
    }
    free(name);
  }
  if (tlimit && !tlimit_per_given) opt_set("tlimit-per", tlimit);
}

/* ---- solver state --------------------------------------------------------- */

static Cvc5TermManager *tm;
static Cvc5 *slv;
static Cvc5SymbolManager *sm;
static Cvc5InputParser *parser;
static bool armed; /* parser has an incremental input that takes appends */

static void solver_open(void) {
  slv = cvc5_new(tm);
  /*
   * As the real driver does when stdin is not a terminal: non-incremental and
   * no well-formedness checks of parsed terms, unless the user said otherwise.
   */
  if (!opt_get("incremental")) cvc5_set_option(slv, "incremental", "false");
  if (!opt_get("wf-checking")) cvc5_set_option(slv, "wf-checking", "false");
  for (size_t i = 0; i < n_opts; i++)
    cvc5_set_option(slv, opts[i].name, opts[i].value);
  sm = cvc5_symbol_manager_new(tm);
  parser = cvc5_parser_new(slv, sm);
  armed = false;
}

static void solver_close(void) {
  cvc5_parser_delete(parser);
  cvc5_symbol_manager_delete(sm);
  cvc5_delete(slv);
  parser = NULL;
  sm = NULL;
  slv = NULL;
}

/* ---- output --------------------------------------------------------------- */

static bool print_success(void) {
  return strcmp(cvc5_get_option(slv, "print-success"), "true") == 0;
}

/*
 * Print a command's output. For check-sat commands, a line of the form
 * `unknown (REASON)` becomes a bare `unknown` (the SMT-LIB answer), and an
 * `(error "...")` answer is kept on one line, since callers read exactly one
 * line per answer.
 */
static void print_output(const char *s, bool is_check_sat) {
  size_t n = strlen(s);
  if (strncmp(s, "(error \"", 8) == 0) {
    for (size_t i = 0; i < n; i++) {
      char c = s[i];
      if ((c == '\n' || c == '\r') && i + 1 < n) c = ' ';
      out_write(&c, 1);
    }
    if (n && s[n - 1] != '\n') out_write("\n", 1);
    return;
  }
  const char *p = s;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (is_check_sat && len > 9 && strncmp(p, "unknown (", 9) == 0 &&
        p[len - 1] == ')')
      out_write("unknown", 7);
    else
      out_write(p, len);
    if (nl) out_write("\n", 1);
    p += len + (nl ? 1 : 0);
  }
}

/* `(error "Parse Error: <stdin>:L.C: msg")`, one line, quotes doubled. */
static void print_parse_error(const char *msg, unsigned long line,
                              unsigned long col) {
  printf("(error \"Parse Error: %s:%lu.%lu: ", input_name, line, col);
  for (const char *p = msg; *p; p++) {
    if (*p == '"')
      out_write("\"\"", 2);
    else if (*p == '\n' || *p == '\r') {
      if (p[1]) out_write(" ", 1);
    } else
      out_write(p, 1);
  }
  out_write("\")\n", 3);
}

/* ---- commands ------------------------------------------------------------- */

/*
 * The incremental string input of cvc5 1.3 has a trap: once the parser has
 * read to the end of what it was given, the next append re-initialises it and
 * in doing so forgets that it is in incremental mode, so the append after that
 * aborts the process ("Must call setIncrementalStringInput prior to using
 * appendIncrementalStringInput"). Re-arming (cvc5_parser_set_inc_str_input)
 * before every chunk avoids it but builds a new parser each time, which made
 * a 40,000-command script three times slower. So: each chunk is exactly one
 * complete s-expression and exactly one command is taken from it, which leaves
 * the parser short of the end of its input; it is re-armed only when it says
 * it is done, after a parse error (the rest of the bad chunk is still
 * buffered), after (reset), or if a chunk unexpectedly yields no command (then
 * the chunk is tried once more on a freshly armed parser).
 */
static void arm(void) {
  cvc5_parser_set_inc_str_input(parser, CVC5_INPUT_LANGUAGE_SMT_LIB_2_6,
                                input_name);
  armed = true;
}

static Cvc5Command next_command(const char *text, const char **err) {
  if (!armed || cvc5_parser_done(parser)) arm();
  cvc5_parser_append_inc_str_input(parser, text);
  *err = NULL;
  Cvc5Command cmd = cvc5_parser_next_command(parser, err);
  if (!cmd && !*err) {
    arm();
    cvc5_parser_append_inc_str_input(parser, text);
    cmd = cvc5_parser_next_command(parser, err);
  }
  if (*err || !cmd) armed = false;
  return cmd;
}

/* Parse and run one complete top-level s-expression. */
static void run_chunk(const char *text, unsigned long line, unsigned long col) {
  const char *err = NULL;
  Cvc5Command cmd = next_command(text, &err);
  if (err) {
    print_parse_error(err, line, col);
    out_flush();
    return;
  }
  if (!cmd) return;
  const char *name = cvc5_cmd_get_name(cmd);
  if (strcmp(name, "reset") == 0) {
    bool success = print_success();
    solver_close(); /* the parser, and the command, go with it */
    /*
     * A new term manager too: the old one keeps what was ever declared in it
     * (datatypes, sorts), so a long-lived process that reset with the same
     * one would grow with every query (about 5 KB per symcc query).
     */
    cvc5_term_manager_delete(tm);
    tm = cvc5_term_manager_new();
    solver_open();
    if (success) out_write("success\n", 8);
    out_flush();
    return;
  }
  bool quit = strcmp(name, "exit") == 0;
  bool is_check_sat = strncmp(name, "check-sat", 9) == 0;
  print_output(cvc5_cmd_invoke(cmd, slv, sm), is_check_sat);
  out_flush();
  if (quit) exit(0);
  cvc5_parser_release(parser); /* frees the parser's copy of the command */
}

/* ---- input splitting ------------------------------------------------------ */

/*
 * Splits stdin into top-level s-expressions. Tracks parenthesis depth outside
 * of string literals ("..." with "" as the escaped quote), quoted symbols
 * (|...|) and comments (; to end of line). Comments at top level are dropped.
 */
typedef enum { S_CODE, S_STRING, S_QSYM, S_COMMENT } Scan;

int main(int argc, char **argv) {
  tm = cvc5_term_manager_new();
  {
    Cvc5 *probe = cvc5_new(tm);
    parse_args(argc, argv, probe);
    cvc5_delete(probe);
  }
  /* Options are applied here, so a bad value fails before reading input. */
  solver_open();

  Buf cur = {0};
  Scan st = S_CODE;
  long depth = 0;
  bool in_atom = false; /* a bare top-level token, e.g. stray text */
  unsigned long line = 1, col = 0, start_line = 1, start_col = 1;
  static char inbuf[1 << 16];

  for (;;) {
    ssize_t got = read(0, inbuf, sizeof inbuf);
    if (got < 0) {
      if (errno == EINTR) continue;
      perror("cvc5-driver: read");
      return 1;
    }
    if (got == 0) break;
    for (ssize_t k = 0; k < got; k++) {
      char c = inbuf[k];
      if (c == '\n') {
        line++;
        col = 0;
      } else {
        col++;
      }
      bool top = depth == 0 && !in_atom && st == S_CODE;
      if (top) {
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
            c == '\v')
          continue;
        if (c == ';') {
          st = S_COMMENT;
          continue;
        }
        start_line = line;
        start_col = col;
      }
      switch (st) {
        case S_COMMENT:
          if (c == '\n') st = S_CODE;
          if (depth == 0 && !in_atom) continue; /* top-level comment */
          break;
        case S_STRING:
          if (c == '"') st = S_CODE; /* "" re-enters via S_CODE below */
          break;
        case S_QSYM:
          if (c == '|') st = S_CODE;
          break;
        case S_CODE:
          if (c == '"')
            st = S_STRING;
          else if (c == '|')
            st = S_QSYM;
          else if (c == ';')
            st = S_COMMENT;
          else if (c == '(')
            depth++;
          else if (c == ')')
            depth--;
          else if (depth == 0)
            in_atom = true;
          break;
      }
      buf_push(&cur, c);
      bool atom_end = in_atom && depth == 0 && st == S_CODE &&
                      (c == ' ' || c == '\t' || c == '\n' || c == '\r');
      bool sexp_end = !in_atom && st == S_CODE && depth == 0 && c == ')';
      if (depth < 0) { /* a stray ')' at top level: let the parser say so */
        depth = 0;
        sexp_end = true;
      }
      if (sexp_end || atom_end) {
        run_chunk(cur.data, start_line, start_col);
        cur.len = 0;
        cur.data[0] = '\0';
        in_atom = false;
      }
    }
  }
  /* End of input: whatever is left over is incomplete; let the parser say. */
  if (cur.len) {
    for (size_t i = 0; i < cur.len; i++)
      if (cur.data[i] != ' ' && cur.data[i] != '\n' && cur.data[i] != '\t' &&
          cur.data[i] != '\r') {
        run_chunk(cur.data, start_line, start_col);
        break;
      }
  }
  out_flush();
  return 0;
}
