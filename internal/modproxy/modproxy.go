// Package modproxy writes this repository's modules as a module proxy
// serves them once they are tagged: for each module, a zip, a .mod and a
// .info file under <module path>/@v/, the layout `go help goproxy`
// describes, so that GOPROXY=file://DIR lets a program outside the
// repository require them as a user would.
//
// A zip holds the files git tracks in the module's directory, read from the
// working tree, under the prefix path@version/, with what
// golang.org/x/mod/zip leaves out left out: a directory holding a go.mod of
// its own (a nested module) and what it holds, vendored packages, and
// anything that is not a regular file. A module below the root without a
// LICENSE gets the root's, as the go command's own zips do. Only the
// standard library is used: a module zip is a plain zip.
package modproxy

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Limits from golang.org/x/mod/zip.
const (
	maxZipFile = 500 << 20 // the files of one module, uncompressed
	maxGoMod   = 16 << 20
	maxLicense = 16 << 20
)

// Module is one module of the repository.
type Module struct {
	Path string // module path, from its go.mod
	Dir  string // slash-separated directory below the repository root; "" for the root
	// Requires are the versions it requires of the repository's other
	// modules, by module path.
	Requires map[string]string
}

// Tag is the git tag that releases the module at version: the version
// itself for the root, prefixed with the directory for a module below it.
func (m Module) Tag(version string) string {
	if m.Dir == "" {
		return version
	}
	return m.Dir + "/" + version
}

// Repo is a git checkout and the files it tracks.
type Repo struct {
	Root    string
	Modules []Module
	files   []string // tracked, slash-separated, relative to Root
}

// Open lists the files git tracks below root and the modules among them
// (every tracked go.mod).
func Open(root string) (*Repo, error) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, cmdErr(err))
	}
	r := &Repo{Root: root}
	for f := range strings.SplitSeq(string(out), "\x00") {
		if f != "" {
			r.files = append(r.files, f)
		}
	}
	slices.Sort(r.files)
	for _, f := range r.files {
		if path.Base(f) != "go.mod" {
			continue
		}
		m, err := readModule(root, f)
		if err != nil {
			return nil, err
		}
		r.Modules = append(r.Modules, m)
	}
	if len(r.Modules) == 0 {
		return nil, fmt.Errorf("git tracks no go.mod in %s", root)
	}
	paths := map[string]bool{}
	for _, m := range r.Modules {
		paths[m.Path] = true
	}
	for _, m := range r.Modules {
		for p := range m.Requires {
			if !paths[p] {
				delete(m.Requires, p)
			}
		}
	}
	return r, nil
}

// readModule reads a go.mod through `go mod edit -json`, the go command's
// own parser.
func readModule(root, gomod string) (Module, error) {
	cmd := exec.Command("go", "mod", "edit", "-json", filepath.FromSlash(gomod))
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return Module{}, fmt.Errorf("go mod edit -json %s: %w", gomod, cmdErr(err))
	}
	var mf struct {
		Module  struct{ Path string }
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &mf); err != nil {
		return Module{}, fmt.Errorf("%s: %w", gomod, err)
	}
	m := Module{Path: mf.Module.Path, Requires: map[string]string{}}
	if dir := path.Dir(gomod); dir != "." {
		m.Dir = dir
	}
	for _, r := range mf.Require {
		m.Requires[r.Path] = r.Version
	}
	return m, nil
}

// SiblingVersion is the one version at which the modules require each
// other; it is an error if they name more than one, or none.
func (r *Repo) SiblingVersion() (string, error) {
	seen := map[string][]string{} // version -> "module requires sibling"
	for _, m := range r.Modules {
		for p, v := range m.Requires {
			seen[v] = append(seen[v], m.Path+" requires "+p)
		}
	}
	versions := slices.Sorted(maps.Keys(seen))
	switch len(versions) {
	case 0:
		return "", errors.New("no module requires another of the repository")
	case 1:
		return versions[0], nil
	}
	var b strings.Builder
	for _, v := range versions {
		slices.Sort(seen[v])
		fmt.Fprintf(&b, "\n  %s: %s", v, strings.Join(seen[v], ", "))
	}
	return "", fmt.Errorf("the modules require each other at more than one version:%s", b.String())
}

// semverTag is a canonical release or pre-release version below v2 (a v2
// module path would need a /v2 suffix).
var semverTag = regexp.MustCompile(`^v[01]\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// WriteProxy writes every module at version into dir, a directory that
// GOPROXY=file://dir serves; t is the time the .info files give.
func (r *Repo) WriteProxy(dir, version string, t time.Time) error {
	if !semverTag.MatchString(version) {
		return fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH, major 0 or 1", version)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{version, t.UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	for _, m := range r.Modules {
		var zbuf bytes.Buffer
		if err := r.Zip(&zbuf, m, version); err != nil {
			return err
		}
		gomod, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(path.Join(m.Dir, "go.mod"))))
		if err != nil {
			return err
		}
		at := filepath.Join(dir, filepath.FromSlash(escape(m.Path)), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			return err
		}
		base := filepath.Join(at, escape(version))
		for name, data := range map[string][]byte{
			base + ".zip":                      zbuf.Bytes(),
			base + ".mod":                      gomod,
			base + ".info":                     info,
			filepath.Join(at, "list"):          []byte(version + "\n"),
			filepath.Join(at, "..", "@latest"): info,
		} {
			if err := os.WriteFile(name, data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// escape is the proxy protocol's case encoding: each capital letter
// becomes '!' and its lower case, so paths differing in case stay apart on
// a file system that folds case.
func escape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if unicode.IsUpper(c) {
			b.WriteByte('!')
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Files are the files of m's zip, slash-separated and relative to its
// directory, sorted; license reports whether the root's LICENSE is added
// because m has none.
func (r *Repo) Files(m Module) (files []string, license bool, err error) {
	nested := map[string]bool{} // directories below m holding a go.mod
	prefix := ""
	if m.Dir != "" {
		prefix = m.Dir + "/"
	}
	var candidates []string
	for _, f := range r.files {
		rel, ok := strings.CutPrefix(f, prefix)
		if !ok {
			continue
		}
		if path.Base(rel) == "go.mod" && rel != "go.mod" {
			nested[path.Dir(rel)] = true
		}
		candidates = append(candidates, rel)
	}
	folded := map[string]string{}
	for _, rel := range candidates {
		if inNested(rel, nested) || vendored(rel) {
			continue
		}
		fi, err := os.Lstat(filepath.Join(r.Root, filepath.FromSlash(prefix+rel)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree: gone from the next commit too
		}
		if err != nil {
			return nil, false, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if err := checkFilePath(rel); err != nil {
			return nil, false, fmt.Errorf("module %s: %w", m.Path, err)
		}
		key := strings.ToLower(rel)
		if other, dup := folded[key]; dup {
			return nil, false, fmt.Errorf("module %s: %s and %s differ only in case", m.Path, other, rel)
		}
		folded[key] = rel
		files = append(files, rel)
	}
	if !slices.Contains(files, "go.mod") {
		return nil, false, fmt.Errorf("module %s: no go.mod in the working tree", m.Path)
	}
	if m.Dir != "" && !slices.Contains(files, "LICENSE") && slices.Contains(r.files, "LICENSE") {
		license = true
	}
	return files, license, nil
}

// inNested reports whether rel lies in a nested module's directory.
func inNested(rel string, nested map[string]bool) bool {
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		if nested[dir] {
			return true
		}
	}
	return false
}

// vendored is x/mod/zip's rule for modules at go 1.24 and later: files of
// packages below a vendor directory, and vendor/modules.txt, are left out.
func vendored(rel string) bool {
	if rel == "vendor/modules.txt" {
		return true
	}
	var i int
	if strings.HasPrefix(rel, "vendor/") {
		i = len("vendor/")
	} else if j := strings.Index(rel, "/vendor/"); j >= 0 {
		i = j + len("/vendor/")
	} else {
		return false
	}
	return strings.Contains(rel[i:], "/")
}

// checkFilePath applies module.CheckFilePath's rules for the names found in
// practice: clean, relative, each element free of the characters some file
// system refuses, and no element a reserved Windows device name.
func checkFilePath(rel string) error {
	if rel == "" || path.Clean(rel) != rel || strings.HasPrefix(rel, "/") {
		return fmt.Errorf("file path %q is not clean and relative", rel)
	}
	for elem := range strings.SplitSeq(rel, "/") {
		if elem == "." || elem == ".." {
			return fmt.Errorf("file path %q has a %q element", rel, elem)
		}
		for _, c := range elem {
			if !fileRuneOK(c) {
				return fmt.Errorf("file path %q: invalid char %q", rel, c)
			}
		}
		short, _, _ := strings.Cut(elem, ".")
		for _, bad := range []string{"CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9"} {
			if strings.EqualFold(short, bad) {
				return fmt.Errorf("file path %q: %q is a reserved file name on Windows", rel, elem)
			}
		}
	}
	return nil
}

func fileRuneOK(c rune) bool {
	if c < 0x80 {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.ContainsRune("!#$%&()+,-.=@[]^_{}~ ", c)
	}
	return unicode.IsLetter(c)
}

// Zip writes m's module zip at version to w.
func (r *Repo) Zip(w io.Writer, m Module, version string) error {
	files, license, err := r.Files(m)
	if err != nil {
		return err
	}
	prefix := m.Path + "@" + version + "/"
	zw := zip.NewWriter(w)
	total := int64(0)
	add := func(name, disk string) error {
		data, err := os.ReadFile(disk)
		if err != nil {
			return err
		}
		total += int64(len(data))
		switch {
		case total > maxZipFile:
			return fmt.Errorf("module %s: files larger than %d bytes", m.Path, maxZipFile)
		case name == "go.mod" && len(data) > maxGoMod, name == "LICENSE" && len(data) > maxLicense:
			return fmt.Errorf("module %s: %s is too large", m.Path, name)
		}
		fw, err := zw.Create(prefix + name)
		if err != nil {
			return err
		}
		_, err = fw.Write(data)
		return err
	}
	for _, rel := range files {
		if err := add(rel, filepath.Join(r.Root, filepath.FromSlash(path.Join(m.Dir, rel)))); err != nil {
			return err
		}
	}
	if license {
		if err := add("LICENSE", filepath.Join(r.Root, "LICENSE")); err != nil {
			return err
		}
	}
	return zw.Close()
}

// cmdErr adds a failed command's standard error to its error.
func cmdErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}
