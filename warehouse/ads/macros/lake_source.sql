{#-
    A table of the lake as a dbt source (read through its Delta log, see the sources' meta), or,
    when the build found that the table does not exist yet (--vars empty_sources: its columns and
    types, from its contract), an empty relation of the same shape: a lake without quotas loaded
    still builds, with null quota columns. A table written before its contract added columns
    (--vars missing_columns) reads with those columns null: an old lake builds before its rebuild.
-#}
{% macro lake_source(source_name, table_name) -%}
    {%- set name = source_name ~ '.' ~ table_name -%}
    {%- set columns = var('empty_sources', {}).get(name) -%}
    {%- set missing = var('missing_columns', {}).get(name) -%}
    {%- if columns -%}
    (select
        {%- for name, data_type in columns.items() %}
        cast(null as {{ data_type }}) as {{ adapter.quote(name) }}{% if not loop.last %},{% endif %}
        {%- endfor %}
    where false)
    {%- elif missing -%}
    (select
        *,
        {%- for name, data_type in missing.items() %}
        cast(null as {{ data_type }}) as {{ adapter.quote(name) }}{% if not loop.last %},{% endif %}
        {%- endfor %}
    from {{ source(source_name, table_name) }})
    {%- else -%}
    {{ source(source_name, table_name) }}
    {%- endif -%}
{%- endmacro %}
