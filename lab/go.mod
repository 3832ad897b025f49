module github.com/holdfast-dev/holdfast/lab

go 1.26.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.1.2
	github.com/holdfast-dev/holdfast v0.1.0
	github.com/holdfast-dev/holdfast/redis v0.1.0
	github.com/redis/go-redis/v9 v9.23.0 // sentinel-failover's naive mode: the Sentinel client (FailoverClient) most Go services use
	github.com/redis/rueidis v1.0.79
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace (
	github.com/holdfast-dev/holdfast => ../
	github.com/holdfast-dev/holdfast/redis => ../redis
)
