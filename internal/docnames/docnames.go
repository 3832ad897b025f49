// Package docnames checks that the Go names a Markdown file cites in
// backticks exist in the workspace's Go code, so that a renamed or removed
// field, method or option does not live on in the README.
//
// What counts as a Go name, and what is left alone:
//
//   - Only inline code spans are read; fenced code blocks are programs and
//     shell sessions, and are skipped. A span ends on its line.
//   - A span is first normalized: a leading * or &, type arguments ([T])
//     and a trailing call with its arguments are dropped, and (*T).M or
//     (T).M becomes T.M. What is left must be Go identifiers joined by
//     dots; anything else (flags such as -redis-addr, paths, commands with
//     spaces, JSON, host:port) is no Go name.
//   - A single name is checked only when it is exported and not all
//     capitals: SourceHot, LoadTimeout. All capitals are Redis commands
//     (GET, MOVED), environment variables and acronyms (TTL, TLS);
//     lower-case words are metric names, labels and prose. It must be
//     declared somewhere in the workspace: a top-level name, a field or a
//     method, or a benchmark as -bench names it (GetHit for
//     BenchmarkGetHit); Test…, Benchmark…, Fuzz… and Example… names must
//     be test functions of the workspace's test files. Other projects'
//     names cited bare are listed in externalNames.
//   - A dotted name is checked only when every part after the first is
//     exported: holdfast.reads, server.address and go.work are metric,
//     attribute and file names. Its first part is
//     a package of the workspace (holdfast.New, redis.Options.MaxKeyBytes),
//     resolved in that package; a package outside it (see external), not
//     checked; an exported name (Policy.Hot.TTL, Stats.Get), a top-level
//     name or a field of any package, resolved from there; or a lower-case
//     name of neither kind, a variable of an example (ns.GetMany), whose
//     next part must be a field or method of some type.
//   - Each part after a type, field or var must be one of its fields
//     (nested and promoted ones included) or methods, and the next part is
//     looked up in that member's type.
//   - A span followed by " →" is a former name, as a changelog cites what
//     a change replaced: it must no longer resolve.
//   - In CHANGELOG.md only the unreleased changes are read, up to the first
//     released version's heading: a release's section names the API as it
//     was then.
//
// Names of other packages are allowlisted by package name rather than
// resolved with go/types: resolving them would need every module's
// dependencies in the module cache (and the network on a clean clone),
// while the README cites a handful of them, whose spelling a reader checks
// in their own docs.
package docnames

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode"
)

// external are the packages outside the workspace whose names the Markdown
// may cite (sync.Map, rueidis.Client): the standard library's and the
// third-party modules the project uses or compares itself with.
var external = map[string]bool{
	// The standard library.
	"bytes": true, "context": true, "driver": true, "errors": true, "expvar": true, "fmt": true,
	"fs": true, "fstest": true, "http": true, "httptest": true, "io": true, "json": true,
	"math": true, "net": true, "os": true, "pprof": true, "rand": true, "runtime": true,
	"slices": true, "slog": true, "slogtest": true, "sort": true, "sql": true, "strings": true,
	"sync": true, "synctest": true, "testing": true, "time": true, "tls": true, "atomic": true,
	// Third-party modules.
	"errgroup": true, "gobreaker": true, "groupcache": true, "otel": true, "otter": true,
	"prometheus": true, "promhttp": true, "rueidis": true, "singleflight": true, "sturdyc": true,
	"metric": true, "pgx": true, "ristretto": true, "theine": true, "lru": true,
}

// externalNames are exported names of other projects' APIs that the
// Markdown cites bare, beside the project's name (otter GetIfPresent).
var externalNames = map[string]bool{
	"GetIfPresent":   true, // otter's Cache method
	"GetOrFetch":     true, // sturdyc's Client method
	"SendToReplicas": true, // rueidis.ClientOption's field
}

// Problem is a name a Markdown file cites that the workspace does not
// declare.
type Problem struct {
	File   string
	Line   int
	Span   string // the code span as written
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: `%s`: %s", p.File, p.Line, p.Span, p.Reason)
}

// Check returns a Problem for each Go name that file's text md cites and
// idx does not declare, and how many Go names it checked.
func (idx *Index) Check(file, md string) (problems []Problem, checked int) {
	var out []Problem
	if path.Base(file) == "CHANGELOG.md" {
		md = unreleased(md)
	}
	for _, s := range spans(md) {
		name, ok := goName(s.text)
		if !ok {
			continue
		}
		checked++
		reason := idx.resolve(name)
		switch {
		case s.former && reason == "":
			reason = "cited as a former name (before →), but it still exists"
		case s.former:
			reason = ""
		}
		if reason != "" {
			out = append(out, Problem{File: file, Line: s.line, Span: s.text, Reason: reason})
		}
	}
	return out, checked
}

// unreleased returns the start of a changelog up to its first released
// version's heading ("## v0.1.0 …"): a release's section names the API as
// it was at that release, which later ones may have renamed or removed.
func unreleased(md string) string {
	if i := releasedHeading.FindStringIndex(md); i != nil {
		return md[:i[0]]
	}
	return md
}

var releasedHeading = regexp.MustCompile(`(?m)^## \[?v[0-9]`)

type span struct {
	line   int
	text   string
	former bool // followed by " →": a name a change replaced
}

// spans returns the inline code spans of md outside fenced code blocks.
func spans(md string) []span {
	var out []span
	fence := ""
	n := 0
	for line := range strings.Lines(md) {
		n++
		trimmed := strings.TrimLeft(line, " ")
		if len(line)-len(trimmed) <= 3 {
			if f := fenceOf(trimmed); f != "" && (fence == "" || strings.HasPrefix(f, fence)) {
				if fence == "" {
					fence = f
				} else {
					fence = ""
				}
				continue
			}
		}
		if fence != "" {
			continue
		}
		for rest := line; ; {
			open := strings.IndexByte(rest, '`')
			if open < 0 {
				break
			}
			ticks := len(rest[open:]) - len(strings.TrimLeft(rest[open:], "`"))
			body := rest[open+ticks:]
			end := closing(body, ticks)
			if end < 0 {
				rest = body
				continue
			}
			text := body[:end]
			if len(text) > 1 && text[0] == ' ' && text[len(text)-1] == ' ' {
				text = text[1 : len(text)-1]
			}
			rest = body[end+ticks:]
			out = append(out, span{n, text, strings.HasPrefix(rest, " →")})
		}
	}
	return out
}

// fenceOf returns the fence a line opens or closes (``` or ~~~, or
// longer), or "".
func fenceOf(line string) string {
	for _, c := range []string{"`", "~"} {
		f := line[:len(line)-len(strings.TrimLeft(line, c))]
		if len(f) >= 3 {
			return f
		}
	}
	return ""
}

// closing returns the index in s of a run of exactly ticks backticks, or
// -1.
func closing(s string, ticks int) int {
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		if j-i == ticks {
			return i
		}
		i = j
	}
	return -1
}

var (
	dotted     = regexp.MustCompile(`^[\pL_][\pL\pN_]*(\.[\pL_][\pL\pN_]*)*$`)
	typeArgs   = regexp.MustCompile(`\[[^\[\]]*\]`)
	call       = regexp.MustCompile(`\([^()]*\)$`)
	methodExpr = regexp.MustCompile(`^\(\*?([\pL_][\pL\pN_.]*)\)\.`)
)

// goName normalizes a code span and reports whether it is a Go name to
// check (see the package comment).
func goName(s string) (string, bool) {
	s = strings.TrimSpace(s)
	s = methodExpr.ReplaceAllString(s, "$1.")
	s = strings.TrimLeft(s, "*&")
	s = typeArgs.ReplaceAllString(s, "")
	s = call.ReplaceAllString(s, "")
	if !dotted.MatchString(s) {
		return "", false
	}
	parts := strings.Split(s, ".")
	if len(parts) == 1 {
		return s, exported(s) && strings.IndexFunc(s, unicode.IsLower) >= 0
	}
	for _, p := range parts[1:] {
		if !exported(p) {
			return "", false
		}
	}
	return s, true
}

func exported(s string) bool {
	for _, r := range s {
		return unicode.IsUpper(r)
	}
	return false
}

// resolve returns why name names nothing in the workspace, or "".
func (idx *Index) resolve(name string) string {
	parts := strings.Split(name, ".")
	first := parts[0]
	if len(parts) == 1 {
		for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
			if rest, ok := strings.CutPrefix(first, prefix); ok && (rest == "" || exported(rest) || rest[0] == '_') {
				if idx.tests[first] {
					return ""
				}
				return "no test function of the workspace has this name"
			}
		}
		if idx.members[first] || externalNames[first] || idx.topLevel(first) || idx.tests["Benchmark"+first] {
			return ""
		}
		return "the workspace declares no top-level name, field or method of this name"
	}
	if ps := idx.pkgs[first]; len(ps) > 0 {
		var why string
		for _, p := range ps {
			d := p.decls[parts[1]]
			if d == nil {
				why = fmt.Sprintf("package %s declares no %s", first, parts[1])
				continue
			}
			if why = idx.chain(d, parts[1], parts[2:]); why == "" {
				return ""
			}
		}
		return why
	}
	if external[first] {
		return ""
	}
	if !exported(first) {
		if idx.members[parts[1]] || idx.topLevel(parts[1]) {
			return "" // a variable's field or method
		}
		return fmt.Sprintf("%s is no package of the workspace or of external (a variable's?), and no type has a field or method %s", first, parts[1])
	}
	// An exported first part: a top-level name or a field, of any package.
	why := fmt.Sprintf("the workspace declares no top-level name or field %s", first)
	for _, ps := range idx.pkgs {
		for _, p := range ps {
			if d := p.decls[first]; d != nil {
				if why = idx.chain(d, first, parts[1:]); why == "" {
					return ""
				}
			}
			for _, d := range p.decls {
				if !d.isType {
					continue
				}
				if next, ok := idx.member(d, first, 0); ok {
					if next == nil {
						why = fmt.Sprintf("%s's type is none the index can look into", first)
						continue
					}
					if why = idx.chain(next, first, parts[1:]); why == "" {
						return ""
					}
				}
			}
		}
	}
	return why
}

func (idx *Index) topLevel(name string) bool {
	for _, ps := range idx.pkgs {
		for _, p := range ps {
			if p.decls[name] != nil {
				return true
			}
		}
	}
	return false
}

// chain resolves rest as members, one after the other, starting from d
// (named name).
func (idx *Index) chain(d *decl, name string, rest []string) string {
	for _, part := range rest {
		if d != nil && !d.isType {
			if d.fn != nil {
				d = idx.resultOf(d.pkg, d.fn)
			} else {
				d = idx.typeOf(d.pkg, d.typ)
			}
		}
		if d == nil {
			return fmt.Sprintf("%s has no type the index can look into for %s", name, part)
		}
		next, ok := idx.member(d, part, 0)
		if !ok {
			return fmt.Sprintf("%s has no field or method %s", name, part)
		}
		d, name = next, name+"."+part
	}
	return ""
}
