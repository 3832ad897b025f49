// Command catalogd serves the product catalog over HTTP, reading through
// holdfast: embedded SQLite by default, PostgreSQL with -postgres-dsn, Redis
// as the shared tier with -redis.
//
//	go run ./catalogd                         # SQLite under the user cache dir, in-process tiers
//	go run ./catalogd -redis 127.0.0.1:6379 -postgres-dsn postgres://…
//	go run ./catalogd -redis-sentinel 10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379 -redis-master mymaster
//
// Every flag can also be given as an environment variable: CATALOGD_ and the
// flag's name in capitals with '-' as '_' (-data-dir is CATALOGD_DATA_DIR).
// A flag on the command line wins over its variable. `catalogd -h` lists
// them. Redis's username and password are variables only
// (CATALOGD_REDIS_USERNAME, CATALOGD_REDIS_PASSWORD), and so are Redis
// Sentinel's (CATALOGD_REDIS_SENTINEL_USERNAME,
// CATALOGD_REDIS_SENTINEL_PASSWORD): a flag's value is shown by ps and
// /proc/PID/cmdline to every user of the machine.
//
// What only operators may see (the hot keys, which are users' queries, and
// with -pprof the profiles) is served on a second listener, -admin-addr,
// which must be a loopback address and is off unless set. SIGINT or SIGTERM
// stops accepting connections on both, drains the requests in flight (up to
// -shutdown-timeout) and closes the cache, Redis and the database, in that
// order.
//
// This file only wires: the service is package
// github.com/holdfast-dev/holdfast/catalogd/httpapi, the store (SQLite or
// PostgreSQL) is package sqlstore. Run from the repository root, the go.work
// there resolves the holdfast modules this one requires; the replace
// directives in go.mod do the same when this module is built on its own.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
	"github.com/holdfast-dev/holdfast/catalogd/sqlstore"
	"github.com/holdfast-dev/holdfast/holdfastprom"
	"github.com/holdfast-dev/holdfast/redis"
	"github.com/holdfast-dev/holdfast/tier"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	m := NewMain()
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "catalogd:", err)
		os.Exit(2)
	}
	if err := m.Run(ctx); err != nil {
		m.Logger.Error("catalogd failed to start", "error", err)
		m.Close()
		os.Exit(1)
	}
	<-ctx.Done()
	stop() // a second signal now kills the process at once
	m.Logger.Info("catalogd shutting down: draining requests in flight", "timeout", m.Config.ShutdownTimeout)
	if err := m.Close(); err != nil {
		m.Logger.Error("catalogd shutdown", "error", err)
		os.Exit(1)
	}
	m.Logger.Info("catalogd stopped")
}

// Config is catalogd's configuration, filled by ParseFlags.
type Config struct {
	Addr           string
	AdminAddr      string
	DataDir        string
	PostgresDSN    string
	Redis          string
	RedisSentinel  string
	RedisMaster    string
	RedisKeyPrefix string
	RedisUsername  string // from the environment only
	RedisPassword  string // from the environment only
	// The sentinels' own credentials, from the environment only.
	RedisSentinelUsername string
	RedisSentinelPassword string
	RedisTLS              bool
	RedisTLSCA            string
	RedisTLSServer        string
	MaxLoads              int
	MaxQueries            int
	HotTTL                time.Duration
	Policies              httpapi.Policies
	ShutdownTimeout       time.Duration
	Pprof                 bool
	OTelEndpoint          string
	LogLevel              string
	LogFormat             string
}

// Main is the program: flags in, a serving process out, closed on a signal.
type Main struct {
	Config Config
	Stderr io.Writer
	Logger *slog.Logger
	// Telemetry, when set before Run, receives OpenTelemetry metrics and
	// traces; -otel-endpoint sets it to OTLP/HTTP exporters otherwise.
	Telemetry Telemetry

	stopTelemetry func(context.Context) error // the exporters -otel-endpoint made

	store   catalog.Store
	tier    *redis.Lazy
	cache   *holdfast.Cache
	handler *httpapi.Handler
	server  *httpapi.Server
	admin   *httpapi.Server // nil without -admin-addr
	watch   *redisWatch     // nil without -redis
}

// NewMain returns a Main writing its logs to os.Stderr.
func NewMain() *Main {
	return &Main{Stderr: os.Stderr, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
}

// defaultDataDir is where the SQLite file lives without -data-dir: under
// the user's cache directory, since the generated catalog can always be
// recreated, else ./data.
func defaultDataDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "catalogd")
	}
	return "data"
}

// envName is the environment variable standing for a flag.
func envName(flagName string) string {
	return "CATALOGD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ParseFlags reads args, then the environment for every flag args did not
// set. It returns flag.ErrHelp after printing the usage for -h.
func (m *Main) ParseFlags(args []string) error {
	c := &m.Config
	d := httpapi.DefaultPolicies()
	fs := flag.NewFlagSet("catalogd", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.StringVar(&c.Addr, "addr", ":8080", "address to listen on")
	fs.StringVar(&c.AdminAddr, "admin-addr", "", "loopback address of the admin listener (hot keys; profiles with -pprof), e.g. 127.0.0.1:6060; empty: none")
	fs.StringVar(&c.DataDir, "data-dir", defaultDataDir(), "directory of the SQLite file (catalog.db); unused with -postgres-dsn")
	fs.StringVar(&c.PostgresDSN, "postgres-dsn", "", "PostgreSQL DSN (URL or key=value); empty uses embedded SQLite")
	fs.StringVar(&c.Redis, "redis", "", "comma-separated Redis addresses, standalone or Cluster (detected); empty runs on in-process tiers only")
	fs.StringVar(&c.RedisSentinel, "redis-sentinel", "", "comma-separated addresses of the Redis Sentinels of a primary with replicas (instead of -redis): catalogd uses the primary they name and follows its failovers; needs -redis-master")
	fs.StringVar(&c.RedisMaster, "redis-master", "", "with -redis-sentinel: the name the sentinels monitor the primary under")
	fs.StringVar(&c.RedisKeyPrefix, "redis-key-prefix", "catalogd:", "prefix of every Redis key, to share a Redis with other applications")
	fs.BoolVar(&c.RedisTLS, "redis-tls", false, "connect to Redis over TLS, verifying its certificate against the system's roots (or -redis-tls-ca)")
	fs.StringVar(&c.RedisTLSCA, "redis-tls-ca", "", "PEM file of the CA that signed Redis's certificate; implies -redis-tls")
	fs.StringVar(&c.RedisTLSServer, "redis-tls-server-name", "", "name Redis's certificate must carry, when it is not the host in -redis; implies -redis-tls")
	fs.IntVar(&c.MaxLoads, "max-loads", 0, "database loads on cache misses allowed at once per process; over it a miss gets a stale value or 503 (0: 4 × GOMAXPROCS)")
	fs.IntVar(&c.MaxQueries, "max-queries-in-flight", 0, "search requests, and apart from them list-page requests, in flight at once per process; past it one waits up to 10 ms for a place, then is answered 503 before the cache is asked, so a flood of unique queries leaves the CPU to product and stock reads, which are never capped (0: 8 × GOMAXPROCS; negative: no cap)")
	fs.DurationVar(&c.HotTTL, "hot-ttl", 0, "with -redis: how long a value stays in the in-process hot tier (0: holdfast's default, 1 min); an update on another instance reaches it through Redis within milliseconds, so this bounds staleness only while that stream is down")
	fs.DurationVar(&c.Policies.Product.TTL, "product-ttl", d.Product.TTL, "product info: time to live")
	fs.DurationVar(&c.Policies.Product.StaleIfError, "product-stale-if-error", d.Product.StaleIfError, "product info: how long past its TTL a value may be served when fresh data cannot be had (database failing, load limit reached)")
	fs.DurationVar(&c.Policies.Stock.TTL, "stock-ttl", d.Stock.TTL, "stock: time to live")
	fs.DurationVar(&c.Policies.Stock.SoftTTL, "stock-soft-ttl", d.Stock.SoftTTL, "stock: age after which a value is refreshed (≤ -stock-ttl): in the background with -redis; without it by the next read, which keeps the old value if the load limit rejects the refresh")
	fs.DurationVar(&c.Policies.Stock.StaleIfError, "stock-stale-if-error", d.Stock.StaleIfError, "stock: how long past its TTL a value may be served when fresh data cannot be had (database failing, load limit reached)")
	fs.DurationVar(&c.Policies.List.TTL, "list-ttl", d.List.TTL, "list pages: time to live")
	fs.DurationVar(&c.Policies.List.StaleIfError, "list-stale-if-error", d.List.StaleIfError, "list pages: how long past its TTL a page may be served when fresh data cannot be had (database failing, load limit reached)")
	fs.DurationVar(&c.Policies.Search.TTL, "search-ttl", d.Search.TTL, "search results: time to live")
	fs.DurationVar(&c.Policies.Search.StaleIfError, "search-stale-if-error", d.Search.StaleIfError, "search results: how long past its TTL a result may be served when fresh data cannot be had (database failing, load limit reached)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "how long shutdown waits for requests in flight")
	fs.StringVar(&c.OTelEndpoint, "otel-endpoint", "", "send OpenTelemetry metrics (every 15 s) and traces of the reads that leave the hot tier to this OTLP/HTTP collector (a URL, http://127.0.0.1:4318 say), beside /metrics; none by default")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the admin listener (needs -admin-addr)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug (logs every request), info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: catalogd [flags]\n\nEvery flag may be set by its environment variable instead; a flag given here wins.\n\n")
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(fs.Output(), "  -%s (%s, default %q)\n    \t%s\n", f.Name, envName(f.Name), f.DefValue, f.Usage)
		})
		fmt.Fprintf(fs.Output(), "\nSecrets are environment variables only, never flags (ps shows flags to every user):\n\n")
		for _, v := range secretVars {
			fmt.Fprintf(fs.Output(), "  %s\n    \t%s\n", v.name, v.usage)
		}
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && !set[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.RedisUsername = os.Getenv(envRedisUsername)
	c.RedisPassword = os.Getenv(envRedisPassword)
	c.RedisSentinelUsername = os.Getenv(envSentinelUsername)
	c.RedisSentinelPassword = os.Getenv(envSentinelPassword)
	switch {
	case c.Redis != "" && c.RedisSentinel != "":
		return errors.New("-redis and -redis-sentinel both set: with Sentinel the primary is found through the sentinels; give one of them")
	case c.RedisSentinel != "" && c.RedisMaster == "":
		return errors.New("-redis-sentinel needs -redis-master, the name the sentinels monitor the primary under")
	case c.RedisSentinel == "" && c.RedisMaster != "":
		return errors.New("-redis-master needs -redis-sentinel, the sentinels' addresses")
	}
	if c.AdminAddr != "" {
		if err := checkLoopback(c.AdminAddr); err != nil {
			return err
		}
	} else if c.Pprof {
		return errors.New("-pprof needs -admin-addr: the profiles are served on the admin listener only")
	}
	return m.configureLogger()
}

// The environment variables that hold secrets.
const (
	envRedisUsername    = "CATALOGD_REDIS_USERNAME"
	envRedisPassword    = "CATALOGD_REDIS_PASSWORD"
	envSentinelUsername = "CATALOGD_REDIS_SENTINEL_USERNAME"
	envSentinelPassword = "CATALOGD_REDIS_SENTINEL_PASSWORD"
)

var secretVars = []struct{ name, usage string }{
	{envRedisUsername, "Redis ACL user (AUTH username password); empty: the default user"},
	{envRedisPassword, "Redis password (requirepass, or the ACL user's); empty: no AUTH"},
	{envSentinelUsername, "with -redis-sentinel: the sentinels' own ACL user; empty: the default user"},
	{envSentinelPassword, "with -redis-sentinel: the sentinels' own password (their requirepass, or the ACL user's); empty: no AUTH"},
}

// splitAddrs splits a comma-separated address list.
func splitAddrs(list string) []string {
	addrs := strings.Split(list, ",")
	for i := range addrs {
		addrs[i] = strings.TrimSpace(addrs[i])
	}
	return addrs
}

// checkLoopback refuses an admin address that is not on loopback: the admin
// listener has no authentication, and serves other users' queries and,
// with -pprof, the process's memory and command line.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-admin-addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-admin-addr %q is not a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT): the admin listener has no authentication and serves profiles and other users' queries", addr)
}

// redisTLS returns the TLS configuration the Redis flags ask for, nil for
// plain TCP.
func (c Config) redisTLS() (*tls.Config, error) {
	if !c.RedisTLS && c.RedisTLSCA == "" && c.RedisTLSServer == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.RedisTLSServer}
	if c.RedisTLSCA != "" {
		pem, err := os.ReadFile(c.RedisTLSCA)
		if err != nil {
			return nil, fmt.Errorf("-redis-tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-redis-tls-ca %s: no PEM certificate in it", c.RedisTLSCA)
		}
	}
	return cfg, nil
}

func (m *Main) configureLogger() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(m.Config.LogLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch m.Config.LogFormat {
	case "text":
		m.Logger = slog.New(slog.NewTextHandler(m.Stderr, opts))
	case "json":
		m.Logger = slog.New(slog.NewJSONHandler(m.Stderr, opts))
	default:
		return fmt.Errorf("-log-format %q is not text or json", m.Config.LogFormat)
	}
	return nil
}

// Run opens the database (migrating and seeding it on first start), Redis
// if configured, the cache and the HTTP server, and returns once the server
// is listening. Close undoes it.
func (m *Main) Run(ctx context.Context) error {
	c := m.Config
	log := m.Logger
	start := time.Now()
	// One store over either database: -postgres-dsn picks PostgreSQL,
	// else the SQLite file under -data-dir.
	dialect, source, name := sqlstore.SQLite, filepath.Join(c.DataDir, sqlstore.FileName), "SQLite"
	if c.PostgresDSN != "" {
		dialect, source, name = sqlstore.PostgreSQL, c.PostgresDSN, "PostgreSQL"
	}
	db, err := sqlstore.Open(ctx, dialect, source, nil)
	if err != nil {
		return err
	}
	m.store = db
	attrs := []any{"took", time.Since(start).Round(time.Millisecond)}
	if dialect == sqlstore.SQLite {
		attrs = append([]any{"path", source}, attrs...) // a DSN may hold a password
	}
	log.Info("database: "+name, attrs...)

	hotTTL := c.HotTTL
	var shared tier.Tier
	if c.Redis != "" || c.RedisSentinel != "" {
		var addrs []string
		var sentinel redis.SentinelOptions
		tlsConfig, err := c.redisTLS()
		if err != nil {
			return err
		}
		if c.RedisSentinel != "" {
			// The sentinels are reached as the data nodes are, over TLS
			// when -redis-tls says so.
			sentinel = redis.SentinelOptions{
				Addrs: splitAddrs(c.RedisSentinel), MasterName: c.RedisMaster,
				Username: c.RedisSentinelUsername, Password: c.RedisSentinelPassword, TLS: tlsConfig,
			}
		} else {
			addrs = splitAddrs(c.Redis)
		}
		// Connected in the background: catalogd starts, and serves from
		// its own tiers and the database, while Redis is down. The tier
		// logs what retrying cannot fix (credentials refused, a
		// certificate not trusted); m.watch logs the rest.
		if m.tier, err = redis.NewLazy(redis.Options{
			Addrs: addrs, Sentinel: sentinel, KeyPrefix: c.RedisKeyPrefix,
			Username: c.RedisUsername, Password: c.RedisPassword, TLS: tlsConfig,
			Logger: log,
		}); err != nil {
			return fmt.Errorf("redis %s: %w", cmp.Or(c.Redis, c.RedisSentinel), err)
		}
		shared = m.tier
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := m.tier.WaitConnected(wctx); err != nil {
			log.Warn("Redis not connected yet; serving from in-process tiers and the database, connecting in the background", "addrs", cmp.Or(c.Redis, c.RedisSentinel))
		} else {
			// A zero hot TTL is holdfast's default Hot.TTL, a minute.
			attrs := []any{"addrs", addrs, "cluster", m.tier.Tier().Cluster()}
			if c.RedisSentinel != "" {
				attrs = []any{"sentinels", sentinel.Addrs, "master", c.RedisMaster, "primary", m.tier.Tier().Primary(), "sentinel_auth", c.RedisSentinelPassword != ""}
			}
			log.Info("shared tier: Redis", append(attrs, "key_prefix", c.RedisKeyPrefix, "hot_ttl", cmp.Or(hotTTL, time.Minute),
				"tls", tlsConfig != nil, "auth", c.RedisPassword != "")...)
		}
		cancel()
		m.watch = watchRedis(m.tier, log, time.Second, redisLogInterval)
	} else {
		// Without a shared tier the hot tier is the only cache, so it keeps
		// each value as long as the policy allows: a shorter hot TTL would
		// only send reads to the database sooner. No other instance can be
		// told of an update then; each serves its copy until its TTL.
		hotTTL = 0
		log.Warn("no -redis: running on in-process tiers only; each instance caches on its own and updates reach other instances only when their TTLs end")
	}

	if c.OTelEndpoint != "" && m.Telemetry == (Telemetry{}) {
		if m.Telemetry, m.stopTelemetry, err = otlpTelemetry(ctx, c.OTelEndpoint); err != nil {
			return err
		}
		log.Info("OpenTelemetry: exporting", "endpoint", c.OTelEndpoint)
	}
	m.cache, err = holdfast.New(holdfast.Options{Shared: shared, MaxConcurrentLoads: c.MaxLoads, Logger: log, Tracer: m.Telemetry.tracer()})
	if err != nil {
		return err
	}
	if err := m.Telemetry.register(m.cache); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	if err := errors.Join(
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	); err != nil {
		return err
	}
	// Product and stock keys are ids, digits only; list and search keys are
	// what clients typed, which must not reach the monitoring system.
	hotKeyLabels := holdfastprom.Options{HotKeyLabels: []string{httpapi.NamespaceProduct, httpapi.NamespaceStock}}
	if _, err := holdfastprom.RegisterWith(reg, m.cache, hotKeyLabels); err != nil {
		return err
	}

	p := c.Policies
	for _, pol := range []*holdfast.Policy{&p.Product, &p.Stock, &p.List, &p.Search} {
		pol.Hot.TTL = hotTTL // 0 with -redis: holdfast's default
		if shared == nil {
			pol.Hot.TTL = pol.TTL // capped at the soft time by holdfast
		}
	}
	var checks []httpapi.Check
	if m.tier != nil {
		tier := m.tier
		checks = append(checks, httpapi.Check{Name: "redis", Func: func(ctx context.Context) error {
			// A miss is a healthy answer; only an error means trouble.
			_, _, err := tier.Get(ctx, "readyz")
			return err
		}})
	}
	m.handler, err = httpapi.NewHandler(httpapi.Config{
		Store:    m.store,
		Cache:    m.cache,
		Policies: p,
		Logger:   log,
		Registry: reg,
		Checks:   checks,
		Pprof:    c.Pprof,

		MaxQueriesInFlight: c.MaxQueries,
	})
	if err != nil {
		return err
	}
	m.server = httpapi.NewServer(m.handler, log)
	if err := m.server.Open(c.Addr); err != nil {
		return err
	}
	if c.AdminAddr != "" {
		m.admin = httpapi.NewServer(m.handler.Admin(), log)
		if err := m.admin.Open(c.AdminAddr); err != nil {
			return fmt.Errorf("admin listener: %w", err)
		}
		// "localhost" is looked up: make sure it meant loopback here.
		if a, ok := m.admin.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
			return fmt.Errorf("-admin-addr %q listens on %v, not on loopback", c.AdminAddr, m.admin.Addr())
		}
		log.Info("catalogd admin serving", "url", m.admin.URL(), "pprof", c.Pprof)
	}
	log.Info("catalogd serving", "url", m.server.URL(), "admin", c.AdminAddr != "", "max_loads", c.MaxLoads, "max_queries_in_flight", c.MaxQueries, "startup", time.Since(start).Round(time.Millisecond))
	return nil
}

// Close stops the API and admin servers together, draining their requests
// for up to ShutdownTimeout in all, then closes the cache (waiting for its
// background refreshes), Redis and the database. It is safe after a failed
// Run.
func (m *Main) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownTimeout)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, s := range []*httpapi.Server{m.server, m.admin} {
		if s != nil {
			wg.Go(func() { errs[i] = s.Close(ctx) })
		}
	}
	wg.Wait()
	if m.watch != nil {
		m.watch.Close()
	}
	if m.cache != nil {
		errs = append(errs, m.cache.Close())
	}
	if m.tier != nil {
		errs = append(errs, m.tier.Close())
	}
	if m.store != nil {
		errs = append(errs, m.store.Close())
	}
	if m.stopTelemetry != nil {
		errs = append(errs, m.stopTelemetry(ctx))
	}
	return errors.Join(errs...)
}
