// Package server is the server domain: one Server per game server on this
// node (state, flags, configuration, events) and the Manager that holds them.
package server

import (
	"sync"

	"github.com/wharf/wharf/internal/events"
)

// State is a server's process state, as the wire shows it.
type State string

// The four process states.
const (
	Offline  State = "offline"
	Starting State = "starting"
	Running  State = "running"
	Stopping State = "stopping"
)

// Utilization is the resource usage record of the spec.
type Utilization struct {
	MemoryBytes      uint64  `json:"memory_bytes"`
	MemoryLimitBytes uint64  `json:"memory_limit_bytes"`
	CPUAbsolute      float64 `json:"cpu_absolute"`
	Network          struct {
		RxBytes uint64 `json:"rx_bytes"`
		TxBytes uint64 `json:"tx_bytes"`
	} `json:"network"`
	Uptime    int64 `json:"uptime"`
	State     State `json:"state"`
	DiskBytes int64 `json:"disk_bytes"`
}

// Details is the record of GET /api/servers/:server.
type Details struct {
	State         State         `json:"state"`
	IsSuspended   bool          `json:"is_suspended"`
	Utilization   Utilization   `json:"utilization"`
	Configuration Configuration `json:"configuration"`
}

// Server is one game server.
type Server struct {
	mu    sync.RWMutex
	def   Definition
	state State
	util  Utilization

	events *events.Bus
}

// New returns an offline server for def.
func New(def Definition) *Server {
	return &Server{def: def, state: Offline, events: events.NewBus()}
}

// UUID is the server's identifier.
func (s *Server) UUID() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.def.Config.UUID
}

// Events is the server's event bus.
func (s *Server) Events() *events.Bus { return s.events }

// Definition returns the current configuration.
func (s *Server) Definition() Definition {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.def
}

// Details returns the record served by the API.
func (s *Server) Details() Details {
	s.mu.RLock()
	defer s.mu.RUnlock()
	u := s.util
	u.State = s.state
	return Details{
		State:         s.state,
		IsSuspended:   s.def.Config.Suspended,
		Utilization:   u,
		Configuration: s.def.Config,
	}
}
