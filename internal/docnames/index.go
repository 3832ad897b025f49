package docnames

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Index is every name the workspace's Go code declares: its packages, their
// top-level names (types, funcs, vars, consts), and the members of each type
// (fields, nested struct fields, methods, interface methods).
type Index struct {
	pkgs    map[string][]*pkg // by package name; several packages may share one
	members map[string]bool   // every field and method name, for bare names
	tests   map[string]bool   // Test, Benchmark, Fuzz and Example functions
}

type pkg struct {
	decls map[string]*decl
}

// decl is a top-level name, or the anonymous struct type of a field.
type decl struct {
	pkg     *pkg
	isType  bool
	typ     ast.Expr // a type's definition; a var's declared type (nil when inferred)
	methods map[string]*ast.FuncType
	fn      *ast.FuncType // a func's signature
}

// Load indexes the non-test Go code of every module that root's go.work
// uses, and the test functions of their test files.
func Load(root string) (*Index, error) {
	dirs, err := workModules(root)
	if err != nil {
		return nil, err
	}
	idx := &Index{pkgs: map[string][]*pkg{}, members: map[string]bool{}, tests: map[string]bool{}}
	for _, dir := range dirs {
		if err := idx.addModule(dir); err != nil {
			return nil, err
		}
	}
	return idx, nil
}

// workModules returns the directories of go.work's use directives.
func workModules(root string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	var dirs []string
	inUse := false
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(strings.SplitN(line, "//", 2)[0])
		switch {
		case inUse && line == ")":
			inUse = false
		case inUse && line != "":
			dirs = append(dirs, filepath.Join(root, line))
		case line == "use (":
			inUse = true
		case strings.HasPrefix(line, "use "):
			dirs = append(dirs, filepath.Join(root, strings.TrimSpace(strings.TrimPrefix(line, "use "))))
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%s/go.work uses no module", root)
	}
	return dirs, nil
}

// addModule indexes the packages below dir, down to where another module
// begins.
func (idx *Index) addModule(dir string) error {
	byDir := map[string]map[string]*pkg{} // directory → package name → package
	fset := token.NewFileSet()
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != dir && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != dir && err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") {
			idx.addTests(f)
			return nil
		}
		ps := byDir[filepath.Dir(path)]
		if ps == nil {
			ps = map[string]*pkg{}
			byDir[filepath.Dir(path)] = ps
		}
		p := ps[f.Name.Name]
		if p == nil {
			p = &pkg{decls: map[string]*decl{}}
			ps[f.Name.Name] = p
			idx.pkgs[f.Name.Name] = append(idx.pkgs[f.Name.Name], p)
		}
		idx.addFile(p, f)
		return nil
	})
}

func (idx *Index) addTests(f *ast.File) {
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
			for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
				if strings.HasPrefix(fd.Name.Name, prefix) {
					idx.tests[fd.Name.Name] = true
				}
			}
		}
	}
}

func (idx *Index) addFile(p *pkg, f *ast.File) {
	get := func(name string) *decl {
		d := p.decls[name]
		if d == nil {
			d = &decl{pkg: p, methods: map[string]*ast.FuncType{}}
			p.decls[name] = d
		}
		return d
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				get(d.Name.Name).fn = d.Type
				continue
			}
			get(receiverType(d.Recv.List[0].Type)).methods[d.Name.Name] = d.Type
			idx.members[d.Name.Name] = true
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					td := get(s.Name.Name)
					td.isType, td.typ = true, s.Type
					idx.addMembers(s.Type)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						get(n.Name).typ = s.Type
					}
				}
			}
		}
	}
}

// addMembers records the field and method names a type definition
// declares, nested struct types' included.
func (idx *Index) addMembers(t ast.Expr) {
	ast.Inspect(t, func(n ast.Node) bool {
		if f, ok := n.(*ast.Field); ok {
			for _, name := range f.Names {
				idx.members[name.Name] = true
			}
			if len(f.Names) == 0 {
				idx.members[typeName(f.Type)] = true // embedded
			}
		}
		return true
	})
}

// receiverType is the name of a method's receiver type: T of T, *T, T[P].
func receiverType(e ast.Expr) string { return typeName(e) }

// typeName is the name of a named type expression, without its pointer,
// package qualifier or type arguments; "" for other types.
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.ParenExpr:
		return typeName(e.X)
	case *ast.IndexExpr:
		return typeName(e.X)
	case *ast.IndexListExpr:
		return typeName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// typeOf resolves a type expression written in p to its declaration: a
// named type of p or of a package it names (by package name), or an
// anonymous struct or interface. Nil for other types (slices, maps, funcs,
// types of packages outside the workspace).
func (idx *Index) typeOf(p *pkg, e ast.Expr) *decl {
	switch e := e.(type) {
	case *ast.StarExpr:
		return idx.typeOf(p, e.X)
	case *ast.ParenExpr:
		return idx.typeOf(p, e.X)
	case *ast.IndexExpr:
		return idx.typeOf(p, e.X)
	case *ast.IndexListExpr:
		return idx.typeOf(p, e.X)
	case *ast.Ident:
		if d := p.decls[e.Name]; d != nil && d.isType {
			return d
		}
	case *ast.SelectorExpr:
		if q, ok := e.X.(*ast.Ident); ok {
			for _, other := range idx.pkgs[q.Name] {
				if d := other.decls[e.Sel.Name]; d != nil && d.isType {
					return d
				}
			}
		}
	case *ast.StructType, *ast.InterfaceType:
		return &decl{pkg: p, isType: true, typ: e, methods: map[string]*ast.FuncType{}}
	}
	return nil
}

// member finds name among d's fields and methods, promoted ones included,
// and returns the declaration of its type (nil when that is not a type
// the index holds, such as a method's several results).
func (idx *Index) member(d *decl, name string, depth int) (next *decl, ok bool) {
	if depth > 8 {
		return nil, false
	}
	if ft, ok := d.methods[name]; ok {
		return idx.resultOf(d.pkg, ft), true
	}
	var fields []*ast.Field
	switch t := d.typ.(type) {
	case *ast.StructType:
		fields = t.Fields.List
	case *ast.InterfaceType:
		fields = t.Methods.List
	default:
		// A defined type or alias of another: its fields and, for an
		// alias, its methods.
		if other := idx.typeOf(d.pkg, t); other != nil && other != d {
			return idx.member(other, name, depth+1)
		}
		return nil, false
	}
	for _, f := range fields {
		for _, n := range f.Names {
			if n.Name == name {
				if ft, isFunc := f.Type.(*ast.FuncType); isFunc {
					return idx.resultOf(d.pkg, ft), true
				}
				return idx.typeOf(d.pkg, f.Type), true
			}
		}
	}
	for _, f := range fields {
		if len(f.Names) > 0 {
			continue
		}
		emb := idx.typeOf(d.pkg, f.Type)
		if typeName(f.Type) == name {
			return emb, true
		}
		if emb != nil {
			if next, ok := idx.member(emb, name, depth+1); ok {
				return next, true
			}
		}
	}
	return nil, false
}

// resultOf is the type of a func's single result, if the index holds it.
func (idx *Index) resultOf(p *pkg, ft *ast.FuncType) *decl {
	if ft == nil || ft.Results == nil || len(ft.Results.List) != 1 || len(ft.Results.List[0].Names) > 1 {
		return nil
	}
	return idx.typeOf(p, ft.Results.List[0].Type)
}
