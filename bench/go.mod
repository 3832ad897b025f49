module github.com/holdfast-dev/holdfast/bench

go 1.26.0

require (
	github.com/Yiling-J/theine-go v0.6.3
	github.com/dgraph-io/ristretto/v2 v2.4.2
	github.com/hashicorp/golang-lru/v2 v2.0.7
	github.com/holdfast-dev/holdfast v0.1.0
	github.com/holdfast-dev/holdfast/catalogd v0.1.0
	github.com/holdfast-dev/holdfast/holdfastotel v0.1.0
	github.com/holdfast-dev/holdfast/redis v0.1.0
	github.com/maypok86/otter/v2 v2.4.0
	github.com/prometheus/client_golang v1.25.0
	github.com/redis/rueidis v1.0.79
	github.com/viccon/sturdyc v1.1.5
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.12.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/cpuid/v2 v2.0.9 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.62.0 // indirect
)

replace (
	github.com/holdfast-dev/holdfast => ../
	github.com/holdfast-dev/holdfast/catalogd => ../catalogd
	github.com/holdfast-dev/holdfast/holdfastotel => ../holdfastotel
	github.com/holdfast-dev/holdfast/holdfastprom => ../holdfastprom
	github.com/holdfast-dev/holdfast/redis => ../redis
)
