"""scikit-learn: KMeans and a histogram gradient boosting fit, which run on the GNU OpenMP thread pool its
wheels bundle, and a scorer callback."""

from typing import Any

MODULES = ("sklearn",)


def hook(module: Any) -> list[Any]:
    import numpy
    from sklearn.cluster import KMeans
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = numpy.random.default_rng(0)
    data = rng.standard_normal((2000, 8))
    labels = (data[:, 0] > 0).astype(int)
    kmeans = KMeans(n_clusters=4, n_init=1, random_state=0).fit(data)  # OpenMP threads start here
    boosted = HistGradientBoostingClassifier(max_iter=5, scoring=lambda est, x, y: 0.0).fit(data, labels)
    return [kmeans, boosted, kmeans.predict(data[:10])]
