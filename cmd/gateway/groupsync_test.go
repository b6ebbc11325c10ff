package main

import (
	"sync"
	"testing"
)

// TestGroupSyncerCloseWhileSyncing: the embedded server's stop closes the
// syncer while a connection's commit goroutine may still be syncing; the
// close waits for that sync, and a later sync fails instead of using a
// closed descriptor (-race saw TestEmbeddedDataSync's stop race a sync).
func TestGroupSyncerCloseWhileSyncing(t *testing.T) {
	g, ok, err := newGroupSyncer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip("this platform cannot sync a filesystem")
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for range 50 {
			_ = g.sync()
		}
	}()
	close(start)
	g.close()
	wg.Wait()
	if err := g.sync(); err == nil {
		t.Fatal("sync after close succeeded")
	}
}
