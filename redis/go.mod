module github.com/holdfast-dev/holdfast/redis

go 1.26.0

require (
	github.com/holdfast-dev/holdfast v0.1.0
	github.com/redis/rueidis v1.0.79
)

require golang.org/x/sys v0.49.0 // indirect

replace github.com/holdfast-dev/holdfast => ../
