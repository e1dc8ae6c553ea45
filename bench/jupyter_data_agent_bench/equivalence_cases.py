"""Reference answers and their variants for the equivalence benchmark.

This module is imported both by the benchmark and *inside the kernel* whose
copies give the round-trip forms: the same code builds the same references
on both sides from the same CSV tables, so nothing is pickled across. It
needs only pandas and numpy.

- :func:`build_references`: typical answers computed with pandas from the
  DABench tables (scalars, groupby aggregates, pivots, filtered frames, ...)
  plus the reference outputs of the built-in ARCADE notebooks.
- :data:`REWRITES`: representation changes of an answer (must compare equal).
- :data:`MUTATIONS`: wrong answers close to the reference (must not).

Every variant function returns ``None`` where it is not meaningful for the
value (no NaN to fill, no index to reset, ...); :func:`variants` also drops a
variant that leaves the value unchanged.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

#: alias -> (file under ``tables/``, ``read_csv`` keyword arguments)
TABLES: dict[str, tuple[str, dict]] = {
    "titanic": ("titanic.csv", {}),
    "cars": ("auto-mpg.csv", {}),
    "credit": ("Credit.csv", {"index_col": 0}),
    "hotels": ("hotel_data.csv", {}),
    "gap": ("gapminder_cleaned.csv", {}),
    "ins": ("insurance.csv", {}),
    "vacc": ("country_vaccinations.csv", {"parse_dates": ["date"]}),
    "abalone": ("abalone.csv", {}),
    "msft": ("microsoft.csv", {"index_col": 0}),
    "weather": ("weather_train.csv", {"parse_dates": ["time"]}),
    "baseball": ("baseball_data.csv", {}),
    "election": ("election2016.csv", {}),
    "btc": ("YAHOO-BTC_USD_D.csv", {"parse_dates": ["Date"]}),
    "happy": ("2015.csv", {}),
    "tree": ("tree.csv", {}),
    "arrests": ("arrest_expungibility.csv", {}),
    "eikon": ("tr_eikon_eod_data.csv", {"parse_dates": ["Date"]}),
    "fb": ("fb_articles_20180822_20180829_df.csv", {"index_col": 0}),
    "women": ("percent-bachelors-degrees-women-usa.csv", {}),
    "loans": ("test_Y3wMUE5_7gLdaTN.csv", {}),
}

#: (name, pandas expression over the tables above): the answers a notebook user asks for.
REFERENCES: list[tuple[str, str]] = [
    # scalars of every kind
    ("titanic.mean_age", "titanic['Age'].mean()"),
    ("titanic.n_survived", "int(titanic['Survived'].sum())"),
    ("titanic.survived_np", "titanic['Survived'].sum()"),
    ("titanic.top_port", "titanic['Embarked'].mode()[0]"),
    ("titanic.max_fare_name", "titanic.loc[titanic['Fare'].idxmax(), 'Name']"),
    ("titanic.age_range", "(titanic['Age'].min(), titanic['Age'].max())"),
    ("cars.corr_mpg_weight", "cars['mpg'].corr(cars['weight'])"),
    ("cars.median_hp", "cars['horsepower'].median()"),
    ("ins.std_charges", "ins['charges'].std()"),
    ("ins.share_smokers", "(ins['smoker'] == 'yes').mean()"),
    ("ins.many_children", "bool((ins['children'] > 4).any())"),
    ("btc.first_date", "btc['Date'].min()"),
    ("btc.span", "btc['Date'].max() - btc['Date'].min()"),
    ("btc.date_range", "(btc['Date'].min(), btc['Date'].max())"),
    ("vacc.last_date", "vacc['date'].max()"),
    ("hotels.n_cities", "hotels['city_name'].nunique()"),
    ("weather.mean_temp", "weather['temperature'].mean()"),
    ("weather.first_time", "weather['time'].min()"),
    ("election.total_dem", "election['votes_dem'].sum()"),
    ("credit.pct_zero", "round((credit['Balance'] == 0).mean() * 100, 2)"),
    ("abalone.rings_var", "abalone['Rings'].var()"),
    ("happy.top_country", "happy.sort_values('Happiness Score').iloc[-1]['Country']"),
    ("eikon.first_aapl", "eikon['AAPL.O'].iloc[0]"),
    # Series keyed by group labels
    ("titanic.survival_by_class", "titanic.groupby('Pclass')['Survived'].mean()"),
    ("titanic.fare_by_sex_class", "titanic.groupby(['Sex', 'Pclass'])['Fare'].mean()"),
    ("titanic.port_counts", "titanic['Embarked'].value_counts()"),
    ("titanic.missing_age_by_class", "titanic.groupby('Pclass')['Age'].apply(lambda s: int(s.isna().sum()))"),
    ("titanic.isna_counts", "titanic.isna().sum()"),
    ("titanic.age_describe", "titanic['Age'].describe()"),
    ("titanic.first_name_by_class", "titanic.groupby('Pclass')['Name'].first()"),
    ("titanic.surname_counts", "titanic['Name'].str.split(',').str[0].value_counts().head(10)"),
    ("titanic.age_bands", "pd.cut(titanic['Age'], bins=[0, 18, 60, 100]).value_counts().sort_index()"),
    ("cars.mpg_by_cyl", "cars.groupby('cylinders')['mpg'].mean()"),
    ("cars.count_by_origin", "cars['origin'].value_counts().sort_index()"),
    ("cars.efficient_origin", "cars.groupby('origin')['mpg'].mean() > 25"),
    ("credit.balance_by_ethnicity", "credit.groupby('Ethnicity')['Balance'].median()"),
    ("hotels.city_counts", "hotels['city_name'].value_counts()"),
    ("hotels.brand_top", "hotels['brand_name'].value_counts().head(8)"),
    ("hotels.stars_by_type", "hotels.groupby('hotel_type')['star_rating'].mean()"),
    ("ins.charges_by_region_smoker", "ins.groupby(['region', 'smoker'])['charges'].mean()"),
    ("ins.bmi_by_children", "ins.groupby('children')['bmi'].max()"),
    ("ins.bmi_bins", "pd.cut(ins['bmi'], 4, labels=['low', 'mid', 'high', 'very high']).value_counts()"),
    ("gap.life_2007", "gap[gap['year'] == 2007].groupby('continent')['lifeexp'].mean()"),
    ("gap.pop_by_year", "gap.groupby('year')['pop'].sum()"),
    ("vacc.max_by_country", "vacc.groupby('country')['total_vaccinations'].max()"),
    ("vacc.vaccine_counts", "vacc['vaccines'].value_counts().head(5)"),
    ("vacc.albania_daily", "vacc[vacc['country'] == 'Albania'].set_index('date')['daily_vaccinations']"),
    ("abalone.rings_by_sex", "abalone.groupby('Sex')['Rings'].mean()"),
    ("abalone.sex_share", "abalone['Sex'].value_counts(normalize=True)"),
    ("weather.temp_by_month", "weather.groupby(weather['time'].dt.month)['temperature'].mean()"),
    ("weather.direction_counts", "weather['wind direction'].value_counts()"),
    ("weather.temp_series", "weather.set_index('time')['temperature'].head(48)"),
    ("weather.daily_mean", "weather.set_index('time')['temperature'].resample('D').mean().head(20)"),
    ("weather.times", "weather['time'].head(10)"),
    ("election.dem_top_states", "election.groupby('state_abbr')['votes_dem'].sum().nlargest(10)"),
    ("baseball.salary_by_fa",
     "baseball.groupby('indicator_of_free_agency_eligibility')['salary_in_thousands_of_dollars'].mean()"),
    ("tree.species_counts", "tree['SPP_SYMBOL'].value_counts().head(10)"),
    ("tree.tallest_species", "tree.groupby('SPP_SYMBOL')['HT_M'].mean().sort_values(ascending=False).head(10)"),
    ("arrests.count_by_category", "arrests.groupby('Category')['Count'].sum()"),
    ("happy.score_by_region", "happy.groupby('Region')['Happiness Score'].mean().sort_values()"),
    ("btc.max_close_by_year", "btc.groupby(btc['Date'].dt.year)['Close'].max()"),
    ("btc.first_day_by_year", "btc.groupby(btc['Date'].dt.year)['Date'].min()"),
    ("msft.close_describe", "msft['Close'].describe()"),
    ("eikon.vix_head", "eikon['.VIX'].head(10)"),
    ("loans.gender_counts", "loans['Gender'].value_counts(dropna=False)"),
    ("cars.hp_head", "cars['horsepower'].head(20)"),
    ("titanic.names_head", "titanic['Name'].head(15)"),
    ("titanic.fare_column", "titanic[['Fare']].head(12)"),
    ("cars.mpg_by_origin_frame", "cars.groupby('origin')[['mpg']].mean()"),
    ("btc.close_by_date", "btc.set_index('Date')['Close'].iloc[:30]"),
    # frames
    ("titanic.head", "titanic.head(10)"),
    ("titanic.oldest", "titanic[titanic['Age'] > 65]"),
    ("titanic.rich", "titanic.loc[titanic['Fare'] > 200, ['Name', 'Fare', 'Pclass']]"),
    ("titanic.by_fare", "titanic.sort_values('Fare', ascending=False).head(20)[['Name', 'Fare']]"),
    ("titanic.pivot", "titanic.pivot_table(index='Sex', columns='Pclass', values='Survived', aggfunc='mean')"),
    ("titanic.crosstab", "pd.crosstab(titanic['Sex'], titanic['Embarked'])"),
    ("titanic.named_agg",
     "titanic.groupby('Pclass').agg(mean_age=('Age', 'mean'), n=('PassengerId', 'count'), max_fare=('Fare', 'max'))"),
    ("titanic.sex_class_means", "titanic.groupby(['Sex', 'Pclass'])[['Age', 'Fare']].mean()"),
    ("titanic.fare_stats", "titanic.groupby('Pclass')['Fare'].agg(['min', 'max', 'mean'])"),
    ("titanic.describe", "titanic.describe()"),
    ("titanic.corr", "titanic[['Survived', 'Pclass', 'Age', 'Fare']].corr()"),
    ("cars.describe", "cars.describe()"),
    ("cars.corr", "cars.corr(numeric_only=True)"),
    ("cars.sorted", "cars.sort_values(['cylinders', 'mpg']).head(25)"),
    ("cars.pivot", "cars.pivot_table(index='modelyear', columns='origin', values='mpg', aggfunc='mean')"),
    ("credit.gender_student", "credit.groupby(['Gender', 'Student'])[['Income', 'Balance']].mean()"),
    ("credit.top_balance", "credit.nlargest(10, 'Balance')"),
    ("hotels.best", "hotels[hotels['star_rating'] >= 4.5][['hotel_name', 'city_name', 'star_rating', 'bubble_score']]"),
    ("hotels.by_city",
     "hotels.groupby('city_name').agg(n=('hotel_id', 'count'), stars=('star_rating', 'mean'), "
     "reviews=('review_count', 'sum'))"),
    ("hotels.unbranded", "hotels[hotels['brand_name'].isna()].head(20)"),
    ("ins.pivot", "ins.pivot_table(index='region', columns='smoker', values='charges', aggfunc='median')"),
    ("ins.multi_agg", "ins.groupby(['sex', 'smoker']).agg({'charges': ['mean', 'max'], 'bmi': 'mean'})"),
    ("ins.crosstab_share", "pd.crosstab(ins['region'], ins['children'], normalize='index')"),
    ("gap.pop_pivot", "gap.pivot_table(index='year', columns='continent', values='pop', aggfunc='sum')"),
    ("gap.top5_2007", "gap[gap['year'] == 2007].nlargest(5, 'gdppercap')[['country', 'gdppercap']]"),
    ("gap.asia_wide",
     "gap[gap['continent'] == 'asia'].pivot(index='country', columns='year', values='lifeexp').head(10)"),
    ("vacc.albania", "vacc[vacc['country'] == 'Albania'][['date', 'total_vaccinations', 'daily_vaccinations']]"),
    ("vacc.latest",
     "vacc.sort_values('date').groupby('country').tail(1)[['country', 'date', 'people_vaccinated']].head(30)"),
    ("abalone.rings_describe", "abalone.groupby('Sex')['Rings'].describe()"),
    ("abalone.corr", "abalone.select_dtypes('number').corr()"),
    ("abalone.old", "abalone[abalone['Rings'] > 9]"),
    ("weather.by_temperature", "weather.sort_values('temperature', kind='stable')"),
    ("weather.daily_range", "weather.groupby(weather['time'].dt.date)['temperature'].agg(['min', 'max']).head(30)"),
    ("election.blue", "election[election['per_dem'] > 0.7][['state_abbr', 'county_name', 'per_dem']]"),
    ("baseball.corr", "baseball.iloc[:, :5].corr()"),
    ("tree.pivot", "tree.pivot_table(index='SPP_SYMBOL', values=['DBH_CM', 'HT_M'], aggfunc='mean').head(15)"),
    ("eikon.head", "eikon.head(8)"),
    ("eikon.returns", "eikon.set_index('Date')[['AAPL.O', 'MSFT.O']].pct_change().head(10)"),
    ("eikon.describe", "eikon.describe()"),
    ("happy.top10", "happy.nlargest(10, 'Happiness Score')[['Country', 'Region', 'Happiness Score']]"),
    ("msft.head", "msft[['Date', 'Close']].head(12)"),
    ("loans.incomplete", "loans[loans.isna().any(axis=1)].head(15)"),
    ("arrests.pivot", "arrests.pivot_table(index='Category', columns='Expungible', values='Count', aggfunc='sum')"),
    ("fb.sentiment", "fb.groupby('source')[['neg', 'neu', 'pos']].mean()"),
    ("women.recent", "women[['Year', 'Computer Science', 'Engineering']].tail(10)"),
    ("women.corr", "women.drop(columns='Year').corr().iloc[:5, :5]"),
    # arrays, lists, dicts, an Index
    ("titanic.ports", "titanic['Embarked'].dropna().unique()"),
    ("cars.cylinders", "np.sort(cars['cylinders'].unique())"),
    ("titanic.ages", "titanic['Age'].to_numpy()[:30]"),
    ("abalone.matrix", "abalone[['Length', 'Diameter', 'Height']].to_numpy()[:40]"),
    ("hotels.cities", "sorted(hotels['city_name'].unique().tolist())"),
    ("ins.quartiles", "ins['charges'].quantile([0.25, 0.5, 0.75]).tolist()"),
    ("gap.countries", "gap['country'].unique()[:20].tolist()"),
    ("titanic.incomplete_columns", "titanic.columns[titanic.isna().any()].tolist()"),
    ("titanic.sex_dict", "titanic['Sex'].value_counts().to_dict()"),
    ("cars.mpg_stats", "{'mean': cars['mpg'].mean(), 'std': cars['mpg'].std(), 'n': len(cars)}"),
    ("hotels.city_index", "hotels['city_name'].value_counts().index"),
]

FLOAT_NOISE = 1e-9  # relative: far inside any float tolerance
FLOAT_WRONG = 1e-4  # relative: far outside it


# --------------------------------------------------------------------------
# references


def load_tables(table_dir: str | os.PathLike, aliases: Sequence[str] | None = None,
                tables: Mapping[str, tuple[str, dict]] = TABLES) -> dict[str, pd.DataFrame]:
    """The named tables read with pandas (all of them by default)."""
    names = list(tables) if aliases is None else list(aliases)
    return {a: pd.read_csv(os.path.join(table_dir, tables[a][0]), **tables[a][1]) for a in names}


def _names_in(expr: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(expr)) if isinstance(n, ast.Name)}


def run_cell(source: str, namespace: dict) -> Any:
    """Execute a notebook cell in ``namespace``; the value of its last expression, else None."""
    tree = ast.parse(source)
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr):
        exec(compile(tree, "<cell>", "exec"), namespace)
        return None
    tree.body.pop()
    exec(compile(tree, "<cell>", "exec"), namespace)
    return eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)


def arcade_references(table_dir: str | os.PathLike) -> dict[str, Any]:
    """Each built-in ARCADE notebook's turn outputs, its cells run in order (as in the suite)."""
    from .arcade import load_suite

    refs: dict[str, Any] = {}
    with contextlib.chdir(table_dir):
        for nb in load_suite():
            ns: dict = {}
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                value = run_cell(cell.source, ns)
                if cell.is_turn and value is not None:
                    refs[f"arcade.{nb.name}#{cell.turn}"] = value
    return refs


def build_references(table_dir: str | os.PathLike, specs: Sequence[tuple[str, str]] | None = None, *,
                     arcade: bool = True, tables: Mapping[str, tuple[str, dict]] = TABLES) -> dict[str, Any]:
    """name -> reference value: ``specs`` (default :data:`REFERENCES`) evaluated over the tables
    they name, then the ARCADE notebooks' turn outputs. Deterministic, so a kernel gets the same."""
    specs = REFERENCES if specs is None else specs
    used = sorted({a for _, e in specs for a in _names_in(e) if a in tables})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ns: dict[str, Any] = {"pd": pd, "np": np, **load_tables(table_dir, used, tables)}
        refs = {name: eval(expr, ns) for name, expr in specs}
        if arcade:
            refs.update(arcade_references(table_dir))
    return refs


# --------------------------------------------------------------------------
# helpers


def is_default_index(idx: pd.Index) -> bool:
    """An unnamed 0..n-1 carries no information (a filtered frame's row labels, or group keys that happen
    to be 0..n-1 under the group column's name, do)."""
    return not isinstance(idx, pd.MultiIndex) and idx.name is None and pd.api.types.is_integer_dtype(idx.dtype) \
        and bool((idx == np.arange(len(idx))).all())


def is_missing(v: Any) -> bool:
    try:
        return v is None or bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) \
        and not is_missing(v)


def _is_float(v: Any) -> bool:
    return isinstance(v, (float, np.floating)) and not is_missing(v)


def _is_scalar(x: Any) -> bool:
    return not isinstance(x, (list, tuple, dict, set)) and pd.api.types.is_scalar(x)


def identical(a: Any, b: Any) -> bool:
    """Strictly the same object value (type, labels, dtypes, values, NaN in place)."""
    if type(a) is not type(b):
        return False
    try:
        if isinstance(a, pd.DataFrame):
            return _labels_identical(a.columns, b.columns) and _labels_identical(a.index, b.index) \
                and a.dtypes.equals(b.dtypes) and a.equals(b)
        if isinstance(a, pd.Index):
            return _labels_identical(a, b)
        if isinstance(a, pd.Series):
            return a.dtype == b.dtype and a.equals(b) and _labels_identical(a.index, b.index) and a.name == b.name
        if isinstance(a, pd.api.extensions.ExtensionArray):
            return a.dtype == b.dtype and pd.Series(a).equals(pd.Series(b))
        if isinstance(a, np.ndarray):
            return a.dtype == b.dtype and a.shape == b.shape and bool(pd.Series(a.ravel()).equals(
                pd.Series(b.ravel())))
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
        if is_missing(a) and is_missing(b):
            return True
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _labels_identical(a: pd.Index, b: pd.Index) -> bool:
    """``Index.equals`` ignores names and dtype; here they count."""
    return a.equals(b) and list(a.names) == list(b.names) and a.dtype == b.dtype


def _positions(x: Any) -> Iterator[tuple]:
    """Cell positions from the last row backwards (right to left): the mutations' targets."""
    if isinstance(x, pd.DataFrame):
        for i in range(len(x) - 1, -1, -1):
            for j in range(x.shape[1] - 1, -1, -1):
                yield (i, j)
    elif isinstance(x, np.ndarray) and x.ndim == 2:
        for i in range(x.shape[0] - 1, -1, -1):
            for j in range(x.shape[1] - 1, -1, -1):
                yield (i, j)
    elif isinstance(x, dict):
        for k in reversed(list(x)):
            yield (k,)
    elif isinstance(x, (pd.Series, np.ndarray, pd.api.extensions.ExtensionArray, list, tuple)):
        for i in range(len(x) - 1, -1, -1):
            yield (i,)


def _get(x: Any, pos: tuple) -> Any:
    if isinstance(x, (pd.DataFrame, pd.Series)):
        return x.iat[pos]
    if isinstance(x, (np.ndarray, pd.api.extensions.ExtensionArray)):
        return x[pos]
    return x[pos[0]]


def _set(x: Any, pos: tuple, v: Any) -> Any:
    if isinstance(x, (pd.DataFrame, pd.Series)):
        y = x.copy()
        y.iat[pos] = v
        return y
    if isinstance(x, (np.ndarray, pd.api.extensions.ExtensionArray)):
        y = x.copy()
        y[pos if isinstance(x, np.ndarray) else pos[0]] = v
        return y
    if isinstance(x, dict):
        return {**x, pos[0]: v}
    items = list(x)
    items[pos[0]] = v
    return type(x)(items) if isinstance(x, tuple) else items


def _categorical(x: Any, pos: tuple) -> bool:
    if isinstance(x, pd.DataFrame):
        return isinstance(x.iloc[:, pos[1]].dtype, pd.CategoricalDtype)
    return isinstance(x, pd.Series) and isinstance(x.dtype, pd.CategoricalDtype)


def mutate_one(x: Any, pred: Callable[[Any], bool], change: Callable[[Any], Any],
               limit: int = 200_000) -> Any:
    """``x`` with its last cell satisfying ``pred`` replaced by ``change(cell)`` (None: no such cell)."""
    if _is_scalar(x):
        return change(x) if pred(x) else None
    for n, pos in enumerate(_positions(x)):
        if n >= limit:
            break
        v = _get(x, pos)
        if pred(v) and not _categorical(x, pos):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    return _set(x, pos, change(v))
                except (TypeError, ValueError):
                    continue
    return None


def _map_columns(x: Any, pred: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every Series/column/array/element whose dtype (or value) satisfies ``pred``."""
    if isinstance(x, pd.DataFrame):
        y = x.copy()
        for j in range(x.shape[1]):
            if pred(x.iloc[:, j].dtype):
                y.isetitem(j, fn(x.iloc[:, j]))
        return y
    if isinstance(x, (pd.Series, np.ndarray, pd.api.extensions.ExtensionArray)):
        return fn(x) if pred(x.dtype) else x
    if isinstance(x, (list, tuple)):
        items = [_map_columns(v, pred, fn) for v in x]
        return tuple(items) if isinstance(x, tuple) else items
    if isinstance(x, dict):
        return {k: _map_columns(v, pred, fn) for k, v in x.items()}
    if _is_scalar(x) and not is_missing(x) and pred(np.asarray(x).dtype) and not isinstance(x, (bool, np.bool_)):
        return fn(x)
    return x


def _float_dtype(d: Any) -> bool:
    return pd.api.types.is_float_dtype(d)


def _int_dtype(d: Any) -> bool:
    return pd.api.types.is_integer_dtype(d) and not pd.api.types.is_bool_dtype(d)


def _n_rows(x: Any) -> int:
    if isinstance(x, (pd.DataFrame, pd.Series, list, tuple, pd.api.extensions.ExtensionArray)) or (
            isinstance(x, np.ndarray) and x.ndim >= 1):
        return len(x)
    return 0


def _rows(x: Any, rows: slice) -> Any:
    if isinstance(x, (pd.DataFrame, pd.Series)):
        return x.iloc[rows]
    if isinstance(x, (np.ndarray, pd.api.extensions.ExtensionArray)):
        return x[rows].copy()
    return type(x)(x[rows]) if isinstance(x, tuple) else list(x[rows])


# --------------------------------------------------------------------------
# rewrites: the same answer in another representation


def to_frame(x: Any) -> Any:
    return x.to_frame() if isinstance(x, pd.Series) else None


def squeeze(x: Any) -> Any:
    return x.iloc[:, 0] if isinstance(x, pd.DataFrame) and x.shape[1] == 1 else None


def reset_index(x: Any) -> Any:
    if not isinstance(x, (pd.Series, pd.DataFrame)) or is_default_index(x.index):
        return None
    try:
        return x.reset_index()
    except ValueError:  # a level name collides with a column
        return None


def to_numpy(x: Any) -> Any:
    if isinstance(x, (pd.Index, pd.api.extensions.ExtensionArray)) or (
            isinstance(x, (pd.Series, pd.DataFrame)) and is_default_index(x.index)):
        return x.to_numpy()
    return None


def tolist(x: Any) -> Any:
    if isinstance(x, pd.Index) or (isinstance(x, pd.Series) and is_default_index(x.index)):
        return x.tolist()
    if isinstance(x, (np.ndarray, pd.api.extensions.ExtensionArray)) and x.ndim == 1:
        return x.tolist()
    return list(x) if isinstance(x, tuple) else None


def to_array(x: Any) -> Any:
    if not isinstance(x, (list, tuple)) or not x or any(isinstance(v, (list, tuple, dict)) for v in x):
        return None
    return np.array(x)


def rename_columns(x: Any) -> Any:
    """New header names (plain string headers only: a pivot's column labels are data)."""
    if isinstance(x, pd.Series):
        return x.rename("value" if x.name is None else f"{x.name}_v")
    if isinstance(x, pd.DataFrame) and not isinstance(x.columns, pd.MultiIndex) and x.columns.name is None \
            and all(isinstance(c, str) for c in x.columns):
        return x.rename(columns=lambda c: f"{c}_v")
    return None


def rename_axis(x: Any) -> Any:
    if not isinstance(x, (pd.Series, pd.DataFrame)) or is_default_index(x.index):
        return None
    return x.rename_axis([f"key{i}" if n is None else f"{n}_k" for i, n in enumerate(x.index.names)])


def reorder_columns(x: Any) -> Any:
    return x.iloc[:, ::-1] if isinstance(x, pd.DataFrame) and x.shape[1] >= 2 else None


def astype_object(x: Any) -> Any:
    if isinstance(x, pd.DataFrame):
        return None if all(d == np.dtype(object) for d in x.dtypes) else x.astype(object)
    if isinstance(x, (pd.Series, np.ndarray, pd.api.extensions.ExtensionArray)):
        return None if x.dtype == np.dtype(object) else x.astype(object)
    return None


def float_noise(x: Any) -> Any:
    """Floats times (1 + 1e-9): another summation order."""
    return _map_columns(x, _float_dtype, lambda v: v * (1 + FLOAT_NOISE))


def numpy_python(x: Any) -> Any:
    """A numpy scalar as the Python one and back; a Timestamp as a ``datetime``."""
    if isinstance(x, pd.Timestamp):
        return x.to_pydatetime()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (bool, int, float, str)):
        return np.array(x)[()]
    return None


def one_element(x: Any) -> Any:
    return [x] if _is_scalar(x) and x is not None else None


def strip_pad(x: Any) -> Any:
    return f"  {x}\n" if isinstance(x, str) else None


def dict_series(x: Any) -> Any:
    return pd.Series(x) if isinstance(x, dict) and x else None


def dict_reorder(x: Any) -> Any:
    return dict(reversed(list(x.items()))) if isinstance(x, dict) and len(x) >= 2 else None


def reset_reorder(x: Any) -> Any:
    """Keys as columns, columns reversed, object dtype: three rewrites at once."""
    y = reset_index(x)
    return None if y is None else y.iloc[:, ::-1].astype(object)


# --------------------------------------------------------------------------
# mutations: a different answer


def _bump(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return not v
    if _is_float(v):
        return v + max(1.0, abs(v) * FLOAT_WRONG)
    return v + 1


def off_by_one(x: Any) -> Any:
    """One value (the last one) off by one; a flipped bool."""
    return mutate_one(x, lambda v: _is_number(v) or isinstance(v, (bool, np.bool_)), _bump)


def int_plus_one(x: Any) -> Any:
    """Every integer of a collection + 1 (a count off by one everywhere)."""
    if _is_scalar(x) or _n_rows(x) < 2:
        return None
    return _map_columns(x, _int_dtype, lambda v: v + 1)


def swap_columns(x: Any) -> Any:
    """The values of two same-dtype columns swapped, headers kept."""
    if not isinstance(x, pd.DataFrame):
        return None
    for j in range(x.shape[1]):
        for k in range(j + 1, x.shape[1]):
            a, b = x.iloc[:, j], x.iloc[:, k]
            if a.dtype == b.dtype and not a.reset_index(drop=True).equals(b.reset_index(drop=True)):
                y = x.copy()
                y.isetitem(j, b.to_numpy())
                y.isetitem(k, a.to_numpy())
                return y
    return None


def shuffle_index(x: Any) -> Any:
    """Group keys permuted: every value now sits under another key."""
    if not isinstance(x, (pd.Series, pd.DataFrame)) or is_default_index(x.index) or len(x) < 2:
        return None
    n = len(x)
    perm = np.roll(np.arange(n), 1) if n < 4 else np.random.default_rng(0).permutation(n)
    if (perm == np.arange(n)).any():
        perm = np.roll(np.arange(n), 1)
    y = x.copy()
    y.index = x.index[perm]
    return y


def nan_to_zero(x: Any) -> Any:
    """Missing numbers reported as 0."""
    if _is_scalar(x):
        return 0.0 if isinstance(x, (float, np.floating)) and math.isnan(x) else None
    if isinstance(x, (list, tuple)):
        return mutate_one(x, lambda v: isinstance(v, (float, np.floating)) and math.isnan(v), lambda v: 0.0)
    return _map_columns(x, _float_dtype, lambda v: np.nan_to_num(v, nan=0.0) if isinstance(v, np.ndarray)
                        else v.fillna(0.0))


def _other_label(v: Any, present: set) -> Any:
    if isinstance(v, str):
        new: Any = v + "_x"
    elif isinstance(v, (pd.Timestamp, dt.date, np.datetime64)):
        new = pd.Timestamp(v) + pd.Timedelta(days=1)
        if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
            new = new.date()
    elif isinstance(v, pd.Interval):
        new = pd.Interval(v.left + 1, v.right + 1, closed=v.closed)
    elif _is_number(v):
        new = v + 1
    else:
        return None
    while new in present:
        new = _other_label(new, set())
    return new


def wrong_key(x: Any) -> Any:
    """The first row's group key (its outer level) replaced by a label that is not there."""
    if not isinstance(x, (pd.Series, pd.DataFrame)) or is_default_index(x.index) or not len(x):
        return None
    idx = x.index
    level = idx.levels[0] if isinstance(idx, pd.MultiIndex) else idx
    first = idx[0][0] if isinstance(idx, pd.MultiIndex) else idx[0]
    new = _other_label(first, set(level))
    if new is None:
        return None
    y = x.copy()
    if isinstance(idx, pd.MultiIndex):
        y.index = idx.set_levels(level.where(level != first, new) if not isinstance(level, pd.CategoricalIndex)
                                 else level.rename_categories({first: new}), level=0)
    elif isinstance(idx, pd.CategoricalIndex):
        y.index = idx.rename_categories({first: new})
    else:
        labels = list(idx)
        labels[0] = new
        y.index = pd.Index(labels, name=idx.name)
    return y


def order_flip(x: Any) -> Any:
    """Rows in the opposite order (ascending for descending)."""
    if _n_rows(x) < 2:
        return None
    y = _rows(x, slice(None, None, -1))
    a, b = (x, y) if not isinstance(x, (pd.Series, pd.DataFrame)) else (x.reset_index(drop=True),
                                                                      y.reset_index(drop=True))
    return None if identical(a, b) else y


def truncate(x: Any) -> Any:
    """A long result cut to its first rows (all but the last; 1,000 of a longer one)."""
    n = _n_rows(x)
    return _rows(x, slice(0, min(n - 1, 1000))) if n >= 20 else None


def wrong_rounding(x: Any) -> Any:
    """Floats rounded to one decimal, where that is a visible change."""
    def round1(v: Any) -> Any:
        return np.round(v, 1) if isinstance(v, np.ndarray) else (v.round(1) if hasattr(v, "round") else round(v, 1))

    y = _map_columns(x, _float_dtype, round1)
    return y if _beyond_tolerance(x, y) else None


def _float_values(x: Any) -> np.ndarray:
    if isinstance(x, pd.DataFrame):
        cols = [x.iloc[:, j].to_numpy(dtype=float) for j in range(x.shape[1]) if _float_dtype(x.iloc[:, j].dtype)]
        return np.concatenate(cols) if cols else np.array([])
    if isinstance(x, (pd.Series, np.ndarray)):
        return np.asarray(x, dtype=float).ravel() if _float_dtype(x.dtype) else np.array([])
    if isinstance(x, (list, tuple)):
        parts = [_float_values(v) for v in x]
        return np.concatenate(parts) if parts else np.array([])
    if isinstance(x, dict):
        return _float_values(list(x.values()))
    return np.array([float(x)]) if _is_float(x) else np.array([])


def _beyond_tolerance(x: Any, y: Any, factor: float = 100.0) -> bool:
    """Some float moved by more than ``factor`` times the comparison tolerance (rtol 1e-6, atol 1e-8)."""
    a, b = _float_values(x), _float_values(y)
    if a.shape != b.shape or not a.size:
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.nan_to_num(np.abs(a - b) - factor * (1e-8 + 1e-6 * np.abs(a)), nan=-1.0).max() > 0)


def string_changed(x: Any) -> Any:
    """One text value (the last one) in another case, or with a letter added."""
    def change(s: str) -> str:
        return next((t for t in (s.upper(), s.lower()) if t != s), s + "x")

    return mutate_one(x, lambda v: isinstance(v, str) and bool(v.strip()), change)


def datetime_shift(x: Any) -> Any:
    """One date (the last one) a day off."""
    return mutate_one(x, lambda v: isinstance(v, (pd.Timestamp, pd.Timedelta, np.datetime64)) and not is_missing(v),
                      lambda v: v + pd.Timedelta(days=1))


REWRITES: dict[str, Callable[[Any], Any]] = {
    "to_frame": to_frame,
    "squeeze": squeeze,
    "reset_index": reset_index,
    "to_numpy": to_numpy,
    "tolist": tolist,
    "to_array": to_array,
    "rename_columns": rename_columns,
    "rename_axis": rename_axis,
    "reorder_columns": reorder_columns,
    "astype_object": astype_object,
    "float_noise": float_noise,
    "numpy_python": numpy_python,
    "one_element": one_element,
    "strip_pad": strip_pad,
    "dict_series": dict_series,
    "dict_reorder": dict_reorder,
    "reset_reorder": reset_reorder,
}

MUTATIONS: dict[str, Callable[[Any], Any]] = {
    "off_by_one": off_by_one,
    "int_plus_one": int_plus_one,
    "swap_columns": swap_columns,
    "shuffle_index": shuffle_index,
    "nan_to_zero": nan_to_zero,
    "wrong_key": wrong_key,
    "order_flip": order_flip,
    "truncate": truncate,
    "wrong_rounding": wrong_rounding,
    "string_changed": string_changed,
    "datetime_shift": datetime_shift,
}


def variant(x: Any, kind: str) -> Any:
    """``x`` rewritten or mutated by ``kind`` (None: not meaningful). Runs in the kernel too."""
    fn = REWRITES.get(kind) or MUTATIONS[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(x)


def variants(x: Any) -> Iterator[tuple[str, bool, Any]]:
    """(kind, is_rewrite, value) for every meaningful variant of ``x``."""
    for kinds, rewrite in ((REWRITES, True), (MUTATIONS, False)):
        for kind in kinds:
            try:
                y = variant(x, kind)
            except Exception:  # noqa: BLE001 - a variant that does not apply to this value
                continue
            if y is not None and not identical(x, y):
                yield kind, rewrite, y
