package modproxy_test

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/modproxy"
)

// userProgram uses the modules a service takes: the core, the Redis tier
// and the Prometheus exporter, and links the OpenTelemetry one. It runs
// without a Redis server: the shared tier is the in-memory one, and
// redis.New is only linked.
const userProgram = `package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/holdfastotel"
	"github.com/holdfast-dev/holdfast/holdfastprom"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/redis"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	_ = redis.New
	_ = holdfastotel.Register
)

func main() {
	cache, err := holdfast.New(holdfast.Options{Shared: inmem.New(nil)})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	reg := prometheus.NewRegistry()
	if _, err := holdfastprom.Register(reg, cache); err != nil {
		log.Fatal(err)
	}
	ns, err := cache.Namespace("users", holdfast.Policy{TTL: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	res, err := ns.Get(context.Background(), "42", func(ctx context.Context, key string) ([]byte, error) {
		return []byte("user " + key), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(res.Value), res.Source, len(families) > 0)
}
`

// The modules' requirements on each other name the release version, and a
// program outside the repository builds against them as a user's would:
// from a module proxy that serves the zips the tags will produce, with no
// replace directive and no workspace in play.
func TestUserBuildsFromProxy(t *testing.T) {
	repo := openRepo(t)
	version, err := repo.SiblingVersion()
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := repo.WriteProxy(proxy, version, time.Now()); err != nil {
		t.Fatal(err)
	}

	// The user's directory, module cache included, is fresh, so that no
	// earlier run's copy of a holdfast module stands in for this one. The
	// developer's module cache is the second proxy (its download directory
	// has the proxy's layout), so that third-party modules come from disk
	// when they are there and from proxy.golang.org when not.
	user := t.TempDir()
	modcache := t.TempDir()
	devcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	env := append(os.Environ(),
		"GOWORK=off",
		"GOMODCACHE="+modcache,
		"GOPROXY=file://"+filepath.ToSlash(proxy)+
			",file://"+filepath.ToSlash(filepath.Join(strings.TrimSpace(string(devcache)), "cache", "download"))+
			",https://proxy.golang.org",
		// The holdfast modules are in no checksum database yet; every
		// other module is checked as usual.
		"GONOSUMDB=github.com/holdfast-dev",
		"GOPRIVATE=", "GONOPROXY=", "GOINSECURE=",
		"GOFLAGS=-modcacherw", // so that the test can remove its module cache
		"GOTOOLCHAIN=local",
	)
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = user
		cmd.Env = env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("%s %s: %v", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	wanted := []string{
		"github.com/holdfast-dev/holdfast",
		"github.com/holdfast-dev/holdfast/redis",
		"github.com/holdfast-dev/holdfast/holdfastprom",
		"github.com/holdfast-dev/holdfast/holdfastotel",
	}
	run("go", "mod", "init", "example.com/holdfastuser")
	if err := os.WriteFile(filepath.Join(user, "main.go"), []byte(userProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	get := []string{"get"}
	for _, p := range wanted {
		get = append(get, p+"@"+version)
	}
	run("go", get...)
	run("go", "mod", "tidy")
	run("go", "build", "-trimpath", "-o", "holdfastuser", ".")

	if gomod := strings.TrimSpace(run("go", "env", "GOMOD")); gomod != filepath.Join(user, "go.mod") {
		t.Fatalf("the program's go.mod is %q, want its own %s", gomod, filepath.Join(user, "go.mod"))
	}
	listed := map[string]bool{}
	for line := range strings.Lines(run("go", "list", "-m", "-f", "{{.Path}}\t{{.Version}}\t{{.Replace}}\t{{.Dir}}", "all")) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 4 || !strings.HasPrefix(f[0], "github.com/holdfast-dev/") {
			continue
		}
		path, v, replace, dir := f[0], f[1], f[2], f[3]
		listed[path] = true
		if v != version || replace != "<nil>" || !strings.HasPrefix(dir, modcache+string(filepath.Separator)) {
			t.Errorf("%s: version %q, replaced by %s, in %s; want %s from the proxy, in the module cache %s", path, v, replace, dir, version, modcache)
		}
	}
	for _, p := range wanted {
		if !listed[p] {
			t.Errorf("go list -m all does not list %s", p)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prog := exec.CommandContext(ctx, filepath.Join(user, "holdfastuser"))
	var stderr bytes.Buffer
	prog.Stderr = &stderr // the cache logs its shared tier's capabilities there
	out, err := prog.Output()
	if want := "user 42 loaded true\n"; err != nil || string(out) != want {
		t.Fatalf("the program printed %q (%v), want %q\n%s", out, err, want, stderr.Bytes())
	}
}

// The zips hold each module's own files under path@version/: the root's
// leaves out every module below it, and one below the root carries the
// root's LICENSE.
func TestZipsHoldEachModuleAlone(t *testing.T) {
	repo := openRepo(t)
	if len(repo.Modules) < 2 {
		t.Fatalf("found %d modules, want the root and the ones below it", len(repo.Modules))
	}
	var dirs []string
	for _, m := range repo.Modules {
		if m.Dir != "" {
			dirs = append(dirs, m.Dir+"/")
		}
	}
	for _, m := range repo.Modules {
		names := zipNames(t, repo, m, "v0.1.0")
		prefix := m.Path + "@v0.1.0/"
		for _, name := range names {
			rel, ok := strings.CutPrefix(name, prefix)
			if !ok {
				t.Fatalf("%s: zip entry %s lacks the prefix %s", m.Path, name, prefix)
			}
			if m.Dir == "" && slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(rel, d) }) {
				t.Errorf("%s: zip holds %s, a file of a module of its own", m.Path, rel)
			}
		}
		for _, must := range []string{"go.mod", "LICENSE"} {
			if !slices.Contains(names, prefix+must) {
				t.Errorf("%s: zip has no %s", m.Path, must)
			}
		}
	}
}

// Files leaves out what golang.org/x/mod/zip does: a nested module,
// vendored packages, links; and keeps what it keeps.
func TestFilesFollowModuleZipRules(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":               "module example.com/m\n\ngo 1.26.0\n",
		"LICENSE":              "licence\n",
		"a.go":                 "package m\n",
		"pkg/vendor/v.go":      "package vendor\n",
		"vendor/modules.txt":   "# vendored\n",
		"vendor/x/y/y.go":      "package y\n",
		"sub/go.mod":           "module example.com/m/sub\n\ngo 1.26.0\n",
		"sub/s.go":             "package sub\n",
		"sub/deep/d.go":        "package deep\n",
		"subway/w.go":          "package subway\n",
		"testdata/gone.txt":    "deleted after git add\n",
		"untracked-is-out.txt": "never added\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.go", filepath.Join(dir, "link.go")); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", "go.mod", "LICENSE", "a.go", "pkg", "vendor", "sub", "subway", "testdata", "link.go")
	if err := os.Remove(filepath.Join(dir, "testdata", "gone.txt")); err != nil {
		t.Fatal(err)
	}
	repo, err := modproxy.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range repo.Modules {
		fs, license, err := repo.Files(m)
		if err != nil {
			t.Fatal(err)
		}
		got[m.Path] = fmt.Sprint(fs, license)
	}
	want := map[string]string{
		"example.com/m":     "[LICENSE a.go go.mod pkg/vendor/v.go subway/w.go] false",
		"example.com/m/sub": "[deep/d.go go.mod s.go] true",
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: files %s, want %s", p, got[p], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("modules %v, want %d", got, len(want))
	}
}

// Requirements on siblings at two versions are an error naming both.
func TestSiblingVersionDisagreement(t *testing.T) {
	r := &modproxy.Repo{Modules: []modproxy.Module{
		{Path: "example.com/m"},
		{Path: "example.com/m/a", Dir: "a", Requires: map[string]string{"example.com/m": "v0.1.0"}},
		{Path: "example.com/m/b", Dir: "b", Requires: map[string]string{"example.com/m": "v0.2.0"}},
	}}
	_, err := r.SiblingVersion()
	if err == nil || !strings.Contains(err.Error(), "v0.1.0: example.com/m/a requires example.com/m") ||
		!strings.Contains(err.Error(), "v0.2.0: example.com/m/b requires example.com/m") {
		t.Fatalf("SiblingVersion: %v, want an error naming both versions", err)
	}
	r.Modules[2].Requires["example.com/m"] = "v0.1.0"
	if v, err := r.SiblingVersion(); v != "v0.1.0" || err != nil {
		t.Fatalf("SiblingVersion = %q, %v; want v0.1.0", v, err)
	}
	if got := r.Modules[1].Tag("v0.1.0"); got != "a/v0.1.0" {
		t.Fatalf("Tag = %q, want a/v0.1.0", got)
	}
}

func openRepo(t *testing.T) *modproxy.Repo {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the release check needs a git checkout (it zips the files git tracks): git rev-parse: %v", err)
	}
	repo, err := modproxy.Open(strings.TrimSpace(string(top)))
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

func zipNames(t *testing.T, repo *modproxy.Repo, m modproxy.Module, version string) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := repo.Zip(&buf, m, version); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	return names
}
