"""The training loops side by side: PPO (llm, npae, symbolic), off-policy DRRN, behavioural cloning, and the
skeleton they share (`common.Session`).

The package is also the API's `glamrl.train(config, ...)`: calling it runs `glamrl.api.train` (a package
and a function cannot share the name `glamrl.train`, so the package is callable).
"""

import sys
import types


class _CallableTrain(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from glamrl.api import train

        return train(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableTrain
