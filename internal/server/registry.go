package server

import "github.com/wharf/wharf/internal/runtime"

// registryAuth returns the credentials of docker.registries that apply to
// image (runtime.RegistryAuthFor decides which), or nil. Every pull, the
// server's image and the installer's, asks here.
func (s *Server) registryAuth(image string) *runtime.RegistryAuth {
	cfg := s.deps.Config.Get()
	regs := make(map[string]runtime.RegistryAuth, len(cfg.Docker.Registries))
	for k, v := range cfg.Docker.Registries {
		regs[k] = runtime.RegistryAuth{Username: v.Username, Password: v.Password}
	}
	return runtime.RegistryAuthFor(image, regs)
}
