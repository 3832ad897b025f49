package holdfast_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast"
)

// The root package is what every user reads first (go doc, the editor's
// completion list), so its size is held to what a user calls: at most
// maxRootIdentifiers exported identifiers and methods, and at most
// maxRootFields exported struct fields, over its non-test files. What an
// exporter, a tracer or a tier implements lives in observe and tier; test
// hooks in export_test.go and internal/testhook.
const (
	maxRootIdentifiers = 70
	maxRootFields      = 60
)

func TestRootSurface(t *testing.T) {
	ids, fields := rootSurface(t, ".")
	t.Logf("%d exported identifiers and methods, %d exported struct fields", len(ids), len(fields))
	if len(ids) > maxRootIdentifiers {
		t.Errorf("the root package exports %d identifiers and methods, over %d:\n%s", len(ids), maxRootIdentifiers, strings.Join(ids, "\n"))
	}
	if len(fields) > maxRootFields {
		t.Errorf("the root package's exported structs have %d exported fields, over %d:\n%s", len(fields), maxRootFields, strings.Join(fields, "\n"))
	}
	// The count must see the package: New, Namespace.Get, Policy and
	// Policy.TTL are there whatever else changes.
	for _, want := range []string{"func New", "method Namespace.Get", "type Policy"} {
		if !slices.Contains(ids, want) {
			t.Errorf("the count missed %q: is it reading the package?", want)
		}
	}
	if !slices.Contains(fields, "Policy.TTL") {
		t.Error("the count missed Policy.TTL")
	}
}

// The counter counts what it should: an exported method of an unexported
// type, an unexported field or a test file adds nothing.
func TestRootSurfaceCounter(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", `package p
type T struct{ A, B int; c int; *U }
type U struct{}
type hidden struct{ X int }
func (hidden) M() {}
func (T) M() {}
func (*U) N() {}
func F() {}
func f() {}
var V, w = 1, 2
const C = 1
type G[E any] struct{ Y E }
func (G[E]) M() {}
`)
	write("a_test.go", "package p\nfunc Test() {}\nvar Z = 1\n")
	ids, fields := rootSurface(t, dir)
	wantIDs := []string{"func F", "method G.M", "method T.M", "method U.N", "type G", "type T", "type U", "value C", "value V"}
	wantFields := []string{"G.Y", "T.(embedded)", "T.A", "T.B"}
	if fmt.Sprint(ids) != fmt.Sprint(wantIDs) || fmt.Sprint(fields) != fmt.Sprint(wantFields) {
		t.Errorf("counted %v and %v; want %v and %v", ids, fields, wantIDs, wantFields)
	}
}

// rootSurface lists the exported identifiers and methods, and the exported
// fields of exported structs, of the package in dir, test files left out.
func rootSurface(t *testing.T, dir string) (ids, fields []string) {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					ids = append(ids, "func "+d.Name.Name)
					continue
				}
				if recv := receiverName(d.Recv.List[0].Type); ast.IsExported(recv) {
					ids = append(ids, "method "+recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						ids = append(ids, "type "+s.Name.Name)
						st, ok := s.Type.(*ast.StructType)
						if !ok {
							continue
						}
						for _, fl := range st.Fields.List {
							if len(fl.Names) == 0 {
								fields = append(fields, s.Name.Name+".(embedded)")
							}
							for _, n := range fl.Names {
								if n.IsExported() {
									fields = append(fields, s.Name.Name+"."+n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								ids = append(ids, "value "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(ids)
	sort.Strings(fields)
	return ids, fields
}

// receiverName is the name of a method's receiver type: T of T, *T, T[E]
// and *T[E].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// Stats's doc lists every measure, in the order All yields them, so that
// go doc shows the names Get takes; the capability gauges are one line,
// capability.*.
func TestStatsDocListsEveryMeasure(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "metrics.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE && g.Specs[0].(*ast.TypeSpec).Name.Name == "Stats" {
			doc = g.Doc.Text()
		}
	}
	var listed []string
	for line := range strings.Lines(doc) {
		// The list's lines are indented; a name's continuation lines
		// begin with spaces only.
		if strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t ") {
			listed = append(listed, strings.Fields(line)[0])
		}
	}
	var names []string
	for m := range (holdfast.Stats{}).All() {
		name := m.Name
		if strings.HasPrefix(name, "capability.") {
			name = "capability.*"
			if slices.Contains(names, name) {
				continue
			}
		}
		names = append(names, name)
	}
	if !slices.Equal(listed, names) {
		t.Errorf("Stats's doc lists\n%v\nwant, in All's order,\n%v", listed, names)
	}
}
