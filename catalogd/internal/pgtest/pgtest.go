// Package pgtest gives tests a real PostgreSQL server: a throwaway cluster
// made with the machine's own Debian tooling (pg_createcluster,
// pg_ctlcluster, pg_dropcluster), listening on 127.0.0.1 only, on a free port
// picked at run time, with a password-protected role for the tests.
//
// A test binary starts at most one cluster, on the first call to
// NewDatabase, and each call then creates a new empty database in it, so
// tests do not see each other's data. The cluster is dropped
// (pg_dropcluster --stop) when the test binary's tests are done if the
// package's TestMain calls Main, or else in the t.Cleanup of the test that
// started it — in both cases whether the tests passed or failed. A binary
// killed before it could clean up leaves its cluster behind; the next start
// drops clusters whose creating process is gone, recognising them by name.
//
// When PostgreSQL is not installed, NewDatabase fails the test, on a
// developer's machine as in CI: a test that skips passes without having
// checked anything, and scripts/install-test-deps.sh installs PostgreSQL.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// namePrefix marks clusters made by this package; the creating process's id
// follows it, so orphans can be recognised.
const namePrefix = "hfpgtest_"

// role is the login role the returned DSNs use; it owns the databases.
const role = "holdfast"

type cluster struct {
	version, name string
	port          int
	password      string // for both the postgres superuser and role
	gone          bool   // dropped; guarded by dropMu
}

var (
	mainCalled atomic.Bool
	startOnce  sync.Once
	shared     *cluster
	startErr   error
	dbSeq      atomic.Int64
)

// Main runs the tests and then drops the cluster, if one was started. Use
// it from TestMain so that one cluster serves every test in the binary:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
func Main(m *testing.M) int {
	mainCalled.Store(true)
	code := m.Run()
	if shared != nil {
		if err := shared.drop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// NewDatabase returns the DSN of a new, empty database on the test cluster,
// starting the cluster first if this is the binary's first call. The DSN
// connects as a non-superuser role that owns the database, over TCP to
// 127.0.0.1.
func NewDatabase(t testing.TB) string {
	t.Helper()
	startOnce.Do(func() {
		shared, startErr = start(t)
		if shared != nil && !mainCalled.Load() {
			// Without Main, the cluster lives as long as the test that
			// started it; later tests would find it gone.
			c := shared
			t.Cleanup(func() {
				if err := c.drop(); err != nil {
					t.Error(err)
				}
			})
		}
	})
	if startErr != nil {
		t.Fatalf("pgtest: %v", startErr)
	}
	if !mainCalled.Load() && shared.dropped() {
		t.Fatal("pgtest: the cluster was dropped with the test that started it; call pgtest.Main from TestMain to share it")
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, shared.dsn("postgres", "postgres"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" OWNER "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	return shared.dsn(role, name)
}

// Stop stops the test cluster's server with pg_ctlcluster (fast mode:
// open connections are cut, new ones refused), an outage of the database
// as its clients see one. Start brings it back and returns once it accepts
// connections. Every database of the binary is down meanwhile, so only a
// test that runs alone may call them, after NewDatabase.
func Stop() error { return ctl("stop", "-m", "fast") }

// Start starts the server Stop stopped.
func Start() error { return ctl("start") }

func ctl(action string, args ...string) error {
	if shared == nil || shared.dropped() {
		return errors.New("pgtest: no test cluster running: call NewDatabase first")
	}
	return run("pg_ctlcluster", append([]string{shared.version, shared.name, action}, args...)...)
}

func (c *cluster) dsn(user, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, c.password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// start creates, configures and starts a cluster and creates the test role.
func start(t testing.TB) (*cluster, error) {
	version, err := installedVersion()
	if err != nil {
		return nil, fmt.Errorf("%w (run scripts/install-test-deps.sh)", err)
	}
	if os.Geteuid() != 0 {
		// pg_createcluster makes files under /etc and /var/lib as the
		// postgres user, which only root can become without a password.
		return nil, errors.New("pg_createcluster needs root; run the tests as root (as CI does)")
	}
	dropOrphans(version)

	// Both passwords are random: the cluster accepts TCP connections on
	// 127.0.0.1 from anyone on the machine while it runs.
	pw := make([]byte, 16)
	rand.Read(pw)
	c := &cluster{version: version, password: hex.EncodeToString(pw)}

	// initdb runs as the postgres user and reads the superuser's password
	// from a file; make one only that user can read.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(c.password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := chownToPostgres(dir, pwfile); err != nil {
		return nil, err
	}

	// The port is free when picked and may be taken before the server
	// binds it; a start that fails is retried on another port.
	for attempt := 1; ; attempt++ {
		c.port, err = freePort()
		if err != nil {
			return nil, err
		}
		c.name = fmt.Sprintf("%s%d_%d", namePrefix, os.Getpid(), c.port)
		begin := time.Now()
		err = c.create(pwfile)
		if err == nil {
			t.Logf("pgtest: PostgreSQL %s cluster %s on 127.0.0.1:%d started in %v", c.version, c.name, c.port, time.Since(begin).Round(time.Millisecond))
			break
		}
		if dropErr := c.drop(); dropErr != nil {
			err = errors.Join(err, dropErr)
		}
		if attempt == 3 {
			return nil, err
		}
	}
	if err := c.createRole(); err != nil {
		return nil, errors.Join(err, c.drop())
	}
	return c, nil
}

// installedVersion returns the newest PostgreSQL major version with a
// server binary, or an error if there is none or the Debian tools are
// missing.
func installedVersion() (string, error) {
	for _, tool := range []string{"pg_createcluster", "pg_ctlcluster", "pg_dropcluster"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("PostgreSQL is not installed: %w", err)
		}
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	var versions []int
	for _, b := range bins {
		if v, err := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b)))); err == nil {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		return "", errors.New("PostgreSQL is not installed: no /usr/lib/postgresql/<version>/bin/postgres")
	}
	return strconv.Itoa(slices.Max(versions)), nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port != 5432 { // never the well-known port, whatever the kernel says
			return port, nil
		}
	}
}

func chownToPostgres(paths ...string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// create runs pg_createcluster, adds the test settings and starts the
// server.
func (c *cluster) create(pwfile string) error {
	// --start-conf=manual: the init scripts never start it on their own.
	// C.UTF-8: UTF-8 text without depending on which locales are built.
	if err := run("pg_createcluster", c.version, c.name, "-p", strconv.Itoa(c.port),
		"--start-conf=manual", "-e", "UTF8", "--locale=C.UTF-8",
		"--", "--pwfile="+pwfile); err != nil {
		return err
	}
	// The settings go in conf.d (included last, so they win) rather than
	// through pg_createcluster -o, which writes 127.0.0.1 unquoted, a
	// syntax error. listen_addresses is the point: loopback IPv4 only.
	// The rest trade durability, which a throwaway cluster does not need,
	// for speed.
	conf := strings.Join([]string{
		"listen_addresses = '127.0.0.1'",
		"ssl = off",
		"fsync = off",
		"synchronous_commit = off",
		"full_page_writes = off",
		"max_connections = 200",
		"",
	}, "\n")
	confFile := filepath.Join("/etc/postgresql", c.version, c.name, "conf.d", "zz-pgtest.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return err
	}
	return run("pg_ctlcluster", c.version, c.name, "start")
}

func (c *cluster) createRole() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn("postgres", "postgres"))
	if err != nil {
		return fmt.Errorf("connect as postgres: %w", err)
	}
	defer conn.Close(ctx)
	// The password is hex from crypto/rand, so quoting it is safe; DDL
	// takes no bind parameters.
	_, err = conn.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN PASSWORD '"+c.password+"'")
	if err != nil {
		return fmt.Errorf("create role: %w", err)
	}
	return nil
}

var dropMu sync.Mutex

// drop stops the server and deletes the cluster's data, configuration and
// log. It is safe to call twice.
func (c *cluster) drop() error {
	dropMu.Lock()
	defer dropMu.Unlock()
	if c.gone {
		return nil
	}
	err := dropCluster(c.version, c.name)
	c.gone = err == nil
	return err
}

func (c *cluster) dropped() bool {
	dropMu.Lock()
	defer dropMu.Unlock()
	return c.gone
}

// dropCluster drops a cluster this package made, then removes its
// configuration directory, which pg_dropcluster leaves behind because of the
// file this package added to conf.d.
func dropCluster(version, name string) error {
	dir := filepath.Join("/etc/postgresql", version, name)
	if _, err := os.Stat(filepath.Join(dir, "postgresql.conf")); err == nil {
		if err := run("pg_dropcluster", "--stop", version, name); err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
}

// dropOrphans drops clusters this package made in processes that no longer
// run, such as a test binary killed by its timeout.
func dropOrphans(version string) {
	dirs, _ := filepath.Glob(filepath.Join("/etc/postgresql", version, namePrefix+"*"))
	for _, d := range dirs {
		name := filepath.Base(d)
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(name, namePrefix), "_")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			dropCluster(version, name)
		}
	}
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.Bytes())
	}
	return nil
}
