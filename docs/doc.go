// Package docs holds the project's documentation and the tests that keep it true to the code: the package table
// of architecture.md against the imports of every package of the module.
package docs
