package events

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPublishReachesEverySubscriberInOrder(t *testing.T) {
	b := NewBus()
	s1, s2 := b.Subscribe(10), b.Subscribe(10)
	defer s1.Close()
	defer s2.Close()
	for _, n := range []string{"a", "b", "c"} {
		b.Publish(New(Status, n))
	}
	for _, s := range []*Subscription{s1, s2} {
		for _, want := range []string{"a", "b", "c"} {
			if e := <-s.C; e.Args[0] != want {
				t.Fatalf("got %v, want %s", e, want)
			}
		}
	}
}

func TestSlowSubscriberNeverBlocksPublisher(t *testing.T) {
	b := NewBus()
	slow := b.Subscribe(2)
	fast := b.Subscribe(1000)
	defer slow.Close()
	defer fast.Close()
	done := make(chan struct{})
	go func() {
		for i := 0; i < 500; i++ {
			b.Publish(New(ConsoleOutput, "line"))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("publishing blocked on a subscriber that does not read")
	}
	if len(fast.C) != 500 {
		t.Fatalf("fast subscriber got %d events, want 500", len(fast.C))
	}
	if slow.Dropped() != 498 {
		t.Fatalf("slow subscriber dropped %d, want 498", slow.Dropped())
	}
	if slow.FullFor() <= 0 {
		t.Fatal("FullFor should report a full queue")
	}
	<-slow.C
	if slow.FullFor() != 0 {
		t.Fatal("FullFor should reset once the reader catches up")
	}
}

func TestCloseIsSafeWithConcurrentPublish(t *testing.T) {
	b := NewBus()
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Go(func() {
			s := b.Subscribe(1)
			b.Publish(New(Stats, "{}"))
			s.Close()
			s.Close()
		})
		wg.Go(func() { b.Publish(New(Status, "running")) })
	}
	wg.Wait()
	b.Close()
	s := b.Subscribe(1)
	if _, ok := <-s.C; ok {
		t.Fatal("a subscription on a closed bus must be closed")
	}
	if b.Subscribers() != 0 {
		t.Fatalf("%d subscribers left", b.Subscribers())
	}
}
