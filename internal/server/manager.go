package server

import (
	"context"
	"log/slog"
	"sort"
	"sync"

	"github.com/wharf/wharf/internal/panel"
)

// Manager holds the servers of this node.
type Manager struct {
	log *slog.Logger

	mu      sync.RWMutex
	servers map[string]*Server
}

// NewManager returns an empty manager.
func NewManager(log *slog.Logger) *Manager {
	return &Manager{log: log, servers: make(map[string]*Server)}
}

// Get returns the server with the given UUID.
func (m *Manager) Get(uuid string) (*Server, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.servers[uuid]
	return s, ok
}

// All returns every server, ordered by UUID.
func (m *Manager) All() []*Server {
	m.mu.RLock()
	out := make([]*Server, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s)
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].UUID() < out[j].UUID() })
	return out
}

// Add registers a server; it reports false when one with that UUID exists.
func (m *Manager) Add(s *Server) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.servers[s.UUID()]; ok {
		return false
	}
	m.servers[s.UUID()] = s
	return true
}

// Remove unregisters a server.
func (m *Manager) Remove(uuid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.servers, uuid)
}

// LoadFromPanel fetches every server assigned to this node and registers
// them. A server whose definition cannot be decoded is logged and skipped.
func (m *Manager) LoadFromPanel(ctx context.Context, c *panel.Client, perPage int, crashDetectionDefault bool) error {
	raws, err := c.AllServers(ctx, perPage, 4)
	if err != nil {
		return err
	}
	for _, raw := range raws {
		def, err := ParseDefinition(raw.Settings, raw.ProcessConfiguration, crashDetectionDefault)
		if err != nil {
			m.log.Error("skipping server with an invalid definition", "server", raw.UUID, "error", err)
			continue
		}
		if !m.Add(New(def)) {
			m.log.Warn("the backend listed a server twice", "server", def.Config.UUID)
		}
	}
	m.log.Info("loaded servers from the backend", "count", len(m.All()))
	return nil
}
