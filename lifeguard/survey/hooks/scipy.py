"""scipy: a sparse product, a linear solve (LAPACK), an integration and a minimisation with callbacks."""

from typing import Any

MODULES = ("scipy.linalg", "scipy.sparse", "scipy.integrate")


def hook(module: Any) -> list[Any]:
    import numpy
    import scipy.integrate
    import scipy.linalg
    import scipy.optimize
    import scipy.sparse

    a = numpy.eye(32) * 2.0 + 0.1
    sparse = scipy.sparse.random(64, 64, density=0.1, format="csr", random_state=0)
    return [scipy.linalg.solve(a, numpy.ones(32)), sparse @ sparse.T,
            scipy.integrate.quad(lambda x: x * x, 0, 1),
            scipy.optimize.minimize(lambda x: (x[0] - 1) ** 2, [0.0])]
