"""scripts/uv_options.py: uv is told where pip would look (the Makefile installs with uv)."""

import importlib.util
import os

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "uv_options.py")


def uv_options(listed):
    spec = importlib.util.spec_from_file_location("uv_options", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.uv_options(listed)


def test_every_index_pip_is_configured_with_reaches_uv_and_the_environment_wins():
    listed = "\n".join(
        [
            ":env:.find-links='/opt/wheels'",
            ":env:.index-url='https://mirror.example/simple'",
            "global.cert='/etc/ca.pem'",
            "global.extra-index-url='file:///a/simple file:///b/simple'",
            "global.find-links='/opt/wheels /more/wheels'",
            "global.index-url='https://pypi.example/simple'",
            "global.timeout='60'",
        ]
    )
    assert uv_options(listed) == [
        "--cert",
        "/etc/ca.pem",
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "file:///a/simple",
        "--extra-index-url",
        "file:///b/simple",
        "--find-links",
        "/opt/wheels",
        "--find-links",
        "/more/wheels",
        "--index-strategy",
        "unsafe-best-match",
    ]


def test_no_pip_configuration_leaves_uv_on_its_defaults():
    assert uv_options("") == []
    assert uv_options("global.index-url='https://mirror.example/simple'\n") == [
        "--index-url",
        "https://mirror.example/simple",
    ]
