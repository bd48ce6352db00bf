"""The production static files storage: whitenoise's compressed manifest storage that also
rewrites the relative ES module imports of Replay's own page scripts."""

from whitenoise.storage import CompressedManifestStaticFilesStorage

# `import { x } from "./y.js";` and `import "./y.js";`, relative only. Django's own
# `support_js_module_import_aggregation` would apply these to every *.js collected, and
# third-party scripts (django_htmx's extensions) import files their app does not ship,
# which fails collectstatic; so they apply to static/replay*.js alone.
MODULE_IMPORTS = (
    (
        r"""(?P<matched>import(?s:(?P<import>[\s\{].*?))\s*from\s*["'](?P<url>\.{1,2}/.*?)["']\s*;)""",
        """import%(import)s from "%(url)s";""",
    ),
    (
        r"""(?P<matched>import\s*["'](?P<url>\.{1,2}/.*?)["']\s*;)""",
        """import "%(url)s";""",
    ),
)


class ModuleManifestStaticFilesStorage(CompressedManifestStaticFilesStorage):  # type: ignore[misc]
    """Names each file by its content hash and rewrites the page scripts' imports to the
    hashed names, so that every importer of a module reaches one URL (one module instance)
    whose cache lifetime follows its content."""

    patterns = (*CompressedManifestStaticFilesStorage.patterns, ("replay*.js", MODULE_IMPORTS))
