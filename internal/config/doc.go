// Package config reads the service configuration: a YAML file with the keys
// of README.md#configuration, defaults for every key, and command-line flags that override
// the file. Unknown keys and bad values are errors that name the key.
package config
