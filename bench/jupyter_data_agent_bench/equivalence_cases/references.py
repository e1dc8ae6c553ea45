"""The reference answers: the DABench tables they read, the pandas expressions that compute them,
and the ARCADE notebooks' turn outputs. Built the same way here and in the kernel."""

from __future__ import annotations

import ast
import contextlib
import os
import warnings
from collections.abc import Mapping, Sequence
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
    from ..arcade import load_suite

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
