// Package docs holds the project's documentation and the tests that keep it true to the code: the package table
// of architecture.md against the imports of every package of the module, the knobs against what the code reads,
// no citation of what the repository does not hold (tracker numbers, outside references), and commit subjects
// in the form CONTRIBUTING.md asks for.
package docs
