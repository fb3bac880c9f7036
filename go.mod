module github.com/wharf/wharf

go 1.26.8

require (
	github.com/beevik/etree v1.8.1
	github.com/pelletier/go-toml/v2 v2.4.3
	go.yaml.in/yaml/v3 v3.0.6
)

require github.com/google/go-cmp v0.7.0
