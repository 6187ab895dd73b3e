module github.com/agentd/agentd

go 1.26.8

require (
	github.com/alecthomas/kong v1.17.0
	go.etcd.io/bbolt v1.5.0
)

require golang.org/x/sys v0.45.0 // indirect
