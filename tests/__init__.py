"""The test suite, a package so that test files import shared helpers from tests.support."""
