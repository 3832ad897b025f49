package docnames

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the directory of go.work above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the package")
		}
		dir = parent
	}
}

func load(t *testing.T) (*Index, string) {
	t.Helper()
	root := repoRoot(t)
	idx, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	return idx, root
}

// markdownFiles lists the repository's tracked Markdown files, or every
// one below root outside .git when git cannot say.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "*.md")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		return slices.DeleteFunc(strings.Split(string(out), "\x00"), func(s string) bool { return s == "" })
	}
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every Go name the repository's Markdown cites exists.
func TestMarkdownNamesExist(t *testing.T) {
	idx, root := load(t)
	files := markdownFiles(t, root)
	if len(files) == 0 {
		t.Fatal("no Markdown file found")
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		problems, n := idx.Check(f, string(b))
		for _, p := range problems {
			t.Error(p)
		}
		checked += n
	}
	// The rules leave most spans alone (metrics, flags, paths); if they
	// left every one, nothing would have been checked.
	if checked < 100 {
		t.Errorf("only %d Go names found in %d Markdown files: are the rules skipping them?", checked, len(files))
	}
	t.Logf("%d Go names checked in %d Markdown files", checked, len(files))
}

// fixture cites names of every kind, right and wrong; the wrong ones are
// the lines wrong names on.
const fixture = "# Fixture\n" +
	"`holdfast.New`, `(*Cache).Namespace`, `Policy.Hot.TTL`, `Stats.Get`, `SourceHot`, `LoadTimeout`\n" +
	"`redis.Options.MaxKeyBytes`, `redis.Options.Cluster.HotCopies`, `Cluster.HotCopies`, `tier.Coordinator.Lease`\n" +
	"`holdfast.NewTyped[T](ns, codec)`, `Result.Stale()`, `ns.GetMany`, `redis.BreakerOptions.OpenTimeout`\n" +
	"not names: `-redis-addr`, `redis/nodes.go`, `holdfast_loads_total`, `GOWORK=off`, `SET NX PXAT`, `GET`, `{\"a\":1}`, `go.work`, `holdfast.reads`\n" +
	"other packages: `sync.Map`, `slog.Logger`, `rueidis.Client`\n" +
	"```go\n" +
	"cache.Nonexistent() // fenced: not checked `redis.Options.InFence`\n" +
	"```\n" +
	"wrong: `redis.Options.Leveling`\n" +
	"wrong: `Policy.MaxStoredBytes` and `holdfast.Nope`\n" +
	"wrong: `SourceNowhere`, `Policy.Hot.Nope`, `(*Cache).Nope`, `TestNoSuchTest`\n" +
	"replaced: `SourceNowhere` → `SourceMemory`; wrong: `SourceHot` → `SourceMemory`\n"

// The checker names every wrong name of the fixture with its file and
// line, and passes every right one.
func TestCheckFixture(t *testing.T) {
	idx, _ := load(t)
	var got []string
	problems, checked := idx.Check("fixture.md", fixture)
	// The names of lines 2 to 4, the three of other packages (taken as
	// they are), the seven wrong ones and the four of the former names'
	// line; none of the "not names".
	if wantChecked := 6 + 4 + 4 + 3 + 7 + 4; checked != wantChecked {
		t.Errorf("Check checked %d names of the fixture; want %d", checked, wantChecked)
	}
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"fixture.md:10: `redis.Options.Leveling`:",
		"fixture.md:11: `Policy.MaxStoredBytes`:",
		"fixture.md:11: `holdfast.Nope`:",
		"fixture.md:12: `SourceNowhere`:",
		"fixture.md:12: `Policy.Hot.Nope`:",
		"fixture.md:12: `(*Cache).Nope`:",
		"fixture.md:12: `TestNoSuchTest`:",
		"fixture.md:13: `SourceHot`: cited as a former name",
	}
	if len(got) != len(want) {
		t.Fatalf("Check found %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q; want it to begin %q", i, got[i], want[i])
		}
	}
}

// A changelog's released sections name the API as it was at their
// release: only what comes before the first version's heading is checked.
func TestChangelogChecksOnlyUnreleased(t *testing.T) {
	idx, _ := load(t)
	md := "# Changelog\n\n## Unreleased\n\n- `holdfast.Nope` is new\n\n## v0.1.0 (2026-12-01)\n\n- `holdfast.Gone` was added\n"
	problems, checked := idx.Check("CHANGELOG.md", md)
	if checked != 1 || len(problems) != 1 || !strings.HasPrefix(problems[0].String(), "CHANGELOG.md:5: `holdfast.Nope`") {
		t.Errorf("checked %d names, problems %v; want the unreleased section's one, holdfast.Nope on line 5", checked, problems)
	}
	if problems, _ := idx.Check("doc/other.md", md); len(problems) != 2 {
		t.Errorf("another file's released-looking sections: %d problems, want both names", len(problems))
	}
}
