package redis

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestDocListsTheUsersMethods: go doc shows Tier and Lazy with the methods
// a user calls, not the ones the Cache calls (those come through the
// embedded driver, an alias of a type in another package). It reads the
// package as go doc does, so a driver method put back on Tier or Lazy
// fails it, as does a user's method removed or renamed.
func TestDocListsTheUsersMethods(t *testing.T) {
	want := map[string][]string{
		"Tier": {"Close", "Cluster", "NodeStats", "Primary", "Sentinel", "Stats"},
		"Lazy": {"Close", "Tier", "WaitConnected"},
	}
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/holdfast-dev/holdfast/redis")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, typ := range pkg.Types {
		methods, ok := want[typ.Name]
		if !ok {
			continue
		}
		seen[typ.Name] = true
		var got []string
		for _, m := range typ.Methods {
			got = append(got, m.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, methods) {
			t.Errorf("go doc lists %s's methods %v, want %v: a method the Cache calls belongs on the driver (tierDriver, lazyDriver)", typ.Name, got, methods)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no type %s in the package's documentation", name)
		}
	}
}
