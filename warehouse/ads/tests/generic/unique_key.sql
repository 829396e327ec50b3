{#- The rows of a model are unique over a (compound) key: dbt's own `unique` takes one column. -#}
{% test unique_key(model, columns) %}

select
    {{ columns | join(', ') }},
    count(*) as occurrences
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1

{% endtest %}
