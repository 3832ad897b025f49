module github.com/holdfast-dev/holdfast

go 1.26.0

require github.com/redis/rueidis v1.0.79

require (
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
