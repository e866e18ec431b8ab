"""Root conftest: the normprops plugin itself is loaded through its ``pytest11`` entry point (install
the package first: ``pip install -e '.[test]'``); here only what the project's own tests need."""

pytest_plugins = ("pytester",)
